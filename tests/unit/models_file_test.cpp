// brisk serve --models FILE: the TOML file of the models to serve and their own flags.
#include "common/models_file.h"

#include <gtest/gtest.h>

namespace brisk {
namespace {

std::vector<ModelFileEntry> parse_ok(const std::string& text) {
  auto parsed = parse_models_file(text, "models.toml");
  if (auto* error = std::get_if<std::string>(&parsed)) ADD_FAILURE() << *error;
  return std::get<std::vector<ModelFileEntry>>(parsed);
}

std::string parse_error(const std::string& text) {
  auto parsed = parse_models_file(text, "models.toml");
  if (std::holds_alternative<std::vector<ModelFileEntry>>(parsed)) {
    ADD_FAILURE() << "accepted: " << text;
    return {};
  }
  return std::get<std::string>(parsed);
}

TEST(ModelsFile, ReadsEachModelInOrderWithItsNamesShareAndFlags) {
  const auto entries = parse_ok(R"(
[[model]]
model = "gemma3-270m"
name = "chat"
aliases = ["gpt-4o-mini", "default"]
critical = true
max-seqs = 4
kv-unified = false
target-itl-ms = 12.5
chat-template = "gemma"

[[model]]
model = "/models/e5.gguf"
weight = 2
pinned = true
preferred-batch-sizes = [8, 16]
)");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].model, "gemma3-270m");
  EXPECT_EQ(entries[0].name, "chat");
  EXPECT_EQ(entries[0].aliases, (std::vector<std::string>{"gpt-4o-mini", "default"}));
  EXPECT_TRUE(entries[0].critical);
  EXPECT_FALSE(entries[0].pinned);
  EXPECT_EQ(entries[0].weight, 1.0);
  EXPECT_EQ(entries[0].line, 2);
  // In key order (the flags' order does not matter).
  EXPECT_EQ(entries[0].flag_args,
            (std::vector<std::string>{"--chat-template=gemma", "--kv-unified=false",
                                      "--max-seqs=4", "--target-itl-ms=12.5"}));
  EXPECT_EQ(entries[1].model, "/models/e5.gguf");
  EXPECT_EQ(entries[1].name, "");
  EXPECT_FALSE(entries[1].critical);
  EXPECT_TRUE(entries[1].pinned);
  EXPECT_EQ(entries[1].weight, 2.0);
  EXPECT_EQ(entries[1].flag_args, (std::vector<std::string>{"--preferred-batch-sizes=8,16"}));
}

TEST(ModelsFile, RefusesWhatItCannotServeWithWhereAndWhy) {
  EXPECT_NE(parse_error("[[model]]\nname = \"x\"\n").find("models.toml:1: [[model]] 1: says no "
                                                          "'model'"),
            std::string::npos);
  EXPECT_NE(parse_error("").find("no [[model]] table"), std::string::npos);
  EXPECT_NE(parse_error("model = \"gemma3-270m\"\n").find("no [[model]] table"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\n[server]\nport = 1\n")
                .find("'server' is not a key of a models file"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\n[[model]]\nmodel = 3\n")
                .find("models.toml:3: [[model]] 2: 'model' must be a non-empty string"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\nweight = 0\n").find("'weight' must be"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\ncritical = \"yes\"\n")
                .find("'critical' must be true or false"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\naliases = \"b\"\n")
                .find("'aliases' must be a list"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]]\nmodel = \"a\"\nmax-seqs = { x = 1 }\n")
                .find("'max-seqs' must be a string, number, boolean or list"),
            std::string::npos);
  EXPECT_NE(parse_error("[[model]\nmodel = \"a\"\n").find("models.toml:1:"), std::string::npos);
}

}  // namespace
}  // namespace brisk
