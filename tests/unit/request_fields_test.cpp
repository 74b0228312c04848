// Every request field is honoured, ignored on purpose, or refused by name; docs/api.md's table
// says which, and must say what the code does.
#include "server/request_fields.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "server/completion_params.h"

namespace brisk {
namespace {

using nlohmann::json;

const char* use_name(FieldUse use) {
  switch (use) {
    case FieldUse::honoured:
      return "honoured";
    case FieldUse::ignored:
      return "ignored";
    case FieldUse::refused:
      return "refused";
  }
  return "?";
}

TEST(RequestFields, DocsApiTableIsTheCodesTable) {
  std::ifstream file(std::string(BRISK_DOCS_DIR) + "/api.md");
  ASSERT_TRUE(file) << "docs/api.md is missing";
  const std::regex row(R"(^\| `([a-z_]+)` \| (yes|—) \| (yes|—) \| (honoured|ignored|refused) \|)");
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(file, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    std::ostringstream out;
    out << m[1] << " chat=" << (m[2] == "yes") << " completions=" << (m[3] == "yes") << " "
        << m[4];
    documented.push_back(out.str());
  }
  std::vector<std::string> coded;
  for (const RequestField& field : request_fields()) {
    std::ostringstream out;
    out << field.name << " chat=" << field.chat << " completions=" << field.completions << " "
        << use_name(field.use);
    coded.push_back(out.str());
  }
  EXPECT_EQ(documented, coded);
}

std::optional<ApiError> check(const std::string& body, CompletionKind kind = CompletionKind::chat) {
  return check_request_fields(json::parse(body), kind);
}

TEST(RequestFields, AnUnknownFieldIsRefusedByName) {
  auto error = check(R"({"messages":[],"mirostat_tau":1.1})");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(error->param, "mirostat_tau");
  EXPECT_NE(error->message.find("unrecognized request field 'mirostat_tau'"),
            std::string::npos);
}

TEST(RequestFields, AFieldOfTheOtherEndpointIsRefused) {
  EXPECT_EQ(check(R"({"prompt":"a","messages":[]})", CompletionKind::text)->param, "messages");
  EXPECT_EQ(check(R"({"messages":[],"echo":false})")->param, "echo");
  EXPECT_EQ(check(R"({"prompt":"a","tools":[]})", CompletionKind::text)->param, "tools");
}

TEST(RequestFields, RefusedFieldsPassWhenTheyAskForNothing) {
  EXPECT_FALSE(check(R"({"n":1,"logit_bias":{},"tools":[],"tool_choice":"none",
      "modalities":["text"],"functions":[],
      "function_call":"auto","audio":null})"));
  EXPECT_FALSE(check(R"({"prompt":"a","echo":false,"best_of":1,"suffix":""})",
                     CompletionKind::text));
  auto best_of = check(R"({"prompt":"a","best_of":2})", CompletionKind::text);
  ASSERT_TRUE(best_of);
  EXPECT_EQ(best_of->param, "best_of");
  for (const char* body :
       {R"({"functions":[{"name":"f"}]})", R"({"function_call":{"name":"f"}})",
        R"({"modalities":["text","audio"]})",
        R"({"audio":{"voice":"x"}})", R"({"reasoning_effort":"low"})"}) {
    const json parsed = json::parse(body);
    auto error = check(body);
    ASSERT_TRUE(error) << body;
    EXPECT_EQ(error->param, parsed.begin().key()) << body;
    EXPECT_NE(error->message.find("not supported"), std::string::npos) << error->message;
  }
}

TEST(RequestFields, IgnoredFieldsAreAccepted) {
  EXPECT_FALSE(check(R"({"user":"u1","store":true,"metadata":{"a":"b"},"service_tier":"auto"})"));
}

TEST(RequestFields, EveryHonouredFieldIsReadByTheParser) {
  // A field the table calls honoured that the parser does not read would be silently dropped:
  // each one, sent with a wrong type, must be a 400 naming it.
  for (const RequestField& field : request_fields()) {
    if (field.use != FieldUse::honoured) continue;
    for (CompletionKind kind : {CompletionKind::chat, CompletionKind::text}) {
      if (!(kind == CompletionKind::chat ? field.chat : field.completions)) continue;
      json body = kind == CompletionKind::chat
                      ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}
                      : json{{"prompt", "hi"}};
      body[field.name] = json::array({json::object({{"not", "valid"}})});
      auto parsed = parse_completion_params(body.dump(), kind);
      const auto* error = std::get_if<ApiError>(&parsed);
      ASSERT_NE(error, nullptr) << field.name << " with a wrong type was accepted";
      EXPECT_EQ(error->param, field.name) << error->message;
    }
  }
}

}  // namespace
}  // namespace brisk
