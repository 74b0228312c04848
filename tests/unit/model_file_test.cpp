// brisk plan --model FILE: the shape read from a GGUF's metadata or a Hugging Face config.json.
// Model files come from outside; a damaged or hostile one must be refused with the key at fault.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "engine/gguf_metadata.h"
#include "gguf.h"
#include "plan/model_profile.h"
#include "scratch_dir.h"

namespace brisk::plan {
namespace {

struct GgufFree {
  void operator()(gguf_context* context) const { gguf_free(context); }
};

// A header-only GGUF of a small llama, with `change` applied to its keys.
std::string write_gguf(const testing::ScratchDir& dir,
                       const std::function<void(gguf_context*)>& change) {
  std::unique_ptr<gguf_context, GgufFree> context(gguf_init_empty());
  gguf_context* raw = context.get();
  gguf_set_val_str(raw, "general.architecture", "llama");
  gguf_set_val_u32(raw, "llama.block_count", 2);
  gguf_set_val_u32(raw, "llama.embedding_length", 64);
  gguf_set_val_u32(raw, "llama.feed_forward_length", 128);
  gguf_set_val_u32(raw, "llama.attention.head_count", 4);
  gguf_set_val_u32(raw, "llama.context_length", 2048);
  const char* tokens[] = {"<s>", "</s>", "a"};
  gguf_set_arr_str(raw, "tokenizer.ggml.tokens", tokens, 3);
  change(raw);
  const std::string path = (dir.path() / "model.gguf").string();
  EXPECT_TRUE(gguf_write_to_file(raw, path.c_str(), /*only_meta=*/true));
  return path;
}

std::string write_config(const testing::ScratchDir& dir, const std::string& fields) {
  const std::string path = (dir.path() / "config.json").string();
  std::ofstream(path) << R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072)"
                      << fields << "}";
  return path;
}

}  // namespace

TEST(ModelFile, GgufShapeIsRead) {
  testing::ScratchDir dir;
  std::string error;
  const auto model = profile_from_gguf(write_gguf(dir, [](gguf_context*) {}), &error);
  ASSERT_TRUE(model) << error;
  EXPECT_EQ(model->layers, 2);
  EXPECT_EQ(model->head_dim, 16);
  EXPECT_EQ(model->vocab_size, 3);
}

// Caught by gguf_metadata_fuzzer: a count stored as a float (1e300, nan) was converted to int,
// which is undefined; now the key is named.
TEST(ModelFile, GgufCountThatIsNoWholeNumberIsNamed) {
  testing::ScratchDir dir;
  std::string error;
  EXPECT_FALSE(profile_from_gguf(
      write_gguf(dir, [](gguf_context* c) { gguf_set_val_f64(c, "llama.block_count", 1e300); }),
      &error));
  EXPECT_NE(error.find("'llama.block_count' is 1e+300, not a whole number from 0 to 2147483647"),
            std::string::npos)
      << error;
  EXPECT_FALSE(profile_from_gguf(
      write_gguf(dir, [](gguf_context* c) { gguf_set_val_i32(c, "llama.context_length", -1); }),
      &error));
  EXPECT_NE(error.find("'llama.context_length' is -1"), std::string::npos) << error;
}

// A shape far beyond any model would overflow the sizes the planner derives from it.
TEST(ModelFile, ImplausibleShapesAreRefused) {
  testing::ScratchDir dir;
  std::string error;
  EXPECT_FALSE(profile_from_gguf(
      write_gguf(dir, [](gguf_context* c) { gguf_set_val_u32(c, "llama.block_count", 1u << 30); }),
      &error));
  EXPECT_NE(error.find("implausible shape"), std::string::npos) << error;
  EXPECT_FALSE(profile_from_hf_config(
      write_config(dir, R"(, "num_hidden_layers": 1000000, "hidden_size": 1048576,
                              "intermediate_size": 1048576)"),
      &error));
  EXPECT_NE(error.find("more than 1e15 parameters"), std::string::npos) << error;
}

// Found by gguf_metadata_fuzzer: ggml loads a type tag outside its enum before its range check
// (undefined in C++, tests/fuzz/ubsan_ignorelist.txt); the file must still be refused cleanly.
TEST(ModelFile, GgufWithAnUnknownTypeTagIsRefused) {
  testing::ScratchDir dir;
  const std::string path = (dir.path() / "bad-type.gguf").string();
  std::string bytes = "GGUF";
  auto append = [&bytes](uint64_t value, size_t size) {
    for (size_t i = 0; i < size; ++i) bytes.push_back(char((value >> (8 * i)) & 0xff));
  };
  append(3, 4);    // version
  append(0, 8);    // tensors
  append(1, 8);    // key/value pairs
  append(1, 8);    // key length
  bytes += "a";    // key
  append(204, 4);  // its type: no GGUF type
  append(0, 8);
  std::ofstream(path, std::ios::binary) << bytes;
  std::string error;
  EXPECT_FALSE(read_gguf_metadata(path, &error));
  EXPECT_EQ(error, "'" + path + "' is not a readable GGUF file");
}

TEST(ModelFile, HfConfigShapeIsRead) {
  testing::ScratchDir dir;
  std::string error;
  const auto model = profile_from_hf_config(write_config(dir, ""), &error);
  ASSERT_TRUE(model) << error;
  EXPECT_EQ(model->layers, 32);
  EXPECT_EQ(model->head_dim, 128);
  EXPECT_NEAR(model->parameters, 8.0e9, 0.1e9);
}

// Caught by hf_config_fuzzer: json::value() threw on a field of the wrong type ("brisk plan
// failed: [json.exception.type_error.302] ..."), get<int>() converted 1e300 to int, and merging
// text_config copied values of any depth (a stack overflow).
TEST(ModelFile, HfConfigFieldOfTheWrongTypeIsNamed) {
  testing::ScratchDir dir;
  std::string error;
  EXPECT_FALSE(
      profile_from_hf_config(write_config(dir, R"(, "tie_word_embeddings": "yes")"), &error));
  EXPECT_NE(error.find("'tie_word_embeddings' must be true or false"), std::string::npos) << error;
  EXPECT_FALSE(
      profile_from_hf_config(write_config(dir, R"(, "num_hidden_layers": 1e300)"), &error));
  EXPECT_NE(error.find("'num_hidden_layers' is 1e+300"), std::string::npos) << error;
  EXPECT_FALSE(profile_from_hf_config(write_config(dir, R"(, "vocab_size": "128256")"), &error));
  EXPECT_NE(error.find("'vocab_size' must be a number"), std::string::npos) << error;

  const int depth = 1'000'000;
  EXPECT_FALSE(profile_from_hf_config(
      write_config(
          dir, R"(, "text_config": {}, "x": )" + std::string(depth, '[') + std::string(depth, ']')),
      &error));
  EXPECT_NE(error.find("nests more than 64 levels deep"), std::string::npos) << error;

  const auto untyped = profile_from_hf_config(write_config(dir, R"(, "model_type": 5)"), &error);
  ASSERT_TRUE(untyped) << error;  // the architecture is only a label
  EXPECT_EQ(untyped->architecture, "");
}

}  // namespace brisk::plan
