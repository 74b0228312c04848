// Runs the random-gguf tool on a tiny shape and reads the file back with ggml's own GGUF reader.
#include <gtest/gtest.h>

#include "scratch_dir.h"
#include <stdlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "ggml.h"
#include "gguf.h"

namespace {
namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = 0;
  std::string output;
};

CommandResult run_random_gguf(const std::string& arguments) {
  const std::string command = std::string(RANDOM_GGUF_EXE) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  CommandResult result;
  std::array<char, 4096> buffer;
  while (size_t read = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.output.append(buffer.data(), read);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

using brisk::testing::read_file;

// A fresh directory per test, removed afterwards.
struct ScratchDir : brisk::testing::ScratchDir {
  ScratchDir() : brisk::testing::ScratchDir("brisk-random-gguf") {}
};

struct GgufFree {
  void operator()(gguf_context* context) const { gguf_free(context); }
};

std::unique_ptr<gguf_context, GgufFree> read_gguf(const fs::path& path) {
  gguf_init_params params{};
  params.no_alloc = true;
  return std::unique_ptr<gguf_context, GgufFree>(gguf_init_from_file(path.c_str(), params));
}

uint32_t u32_value(const gguf_context* gguf, const char* key) {
  const int64_t key_id = gguf_find_key(gguf, key);
  EXPECT_GE(key_id, 0) << key;
  return key_id < 0 ? 0 : gguf_get_val_u32(gguf, key_id);
}

const std::string kTinyShape =
    "--layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2 --type f16 --threads 2";

TEST(RandomGguf, TinyShapeReadsBackWithLlamaKeysAndTensors) {
  ScratchDir scratch;
  const fs::path out = scratch.path() / "tiny.gguf";
  const CommandResult result = run_random_gguf(kTinyShape + " --out " + out.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;

  const auto gguf = read_gguf(out);
  ASSERT_NE(gguf, nullptr);
  // token_embd, 9 per layer, output_norm, output
  EXPECT_EQ(gguf_get_n_tensors(gguf.get()), 1 + 2 * 9 + 2);
  EXPECT_STREQ(gguf_get_val_str(gguf.get(), gguf_find_key(gguf.get(), "general.architecture")),
               "llama");
  EXPECT_EQ(u32_value(gguf.get(), "llama.block_count"), 2u);
  EXPECT_EQ(u32_value(gguf.get(), "llama.embedding_length"), 64u);
  EXPECT_EQ(u32_value(gguf.get(), "llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(gguf_get_arr_n(gguf.get(), gguf_find_key(gguf.get(), "tokenizer.ggml.tokens")),
            128256u);

  const int64_t attn_k = gguf_find_tensor(gguf.get(), "blk.1.attn_k.weight");
  ASSERT_GE(attn_k, 0);
  EXPECT_EQ(gguf_get_tensor_type(gguf.get(), attn_k), GGML_TYPE_F16);
  EXPECT_EQ(gguf_get_tensor_ne(gguf.get(), attn_k)[0], 64);
  EXPECT_EQ(gguf_get_tensor_ne(gguf.get(), attn_k)[1], 2 * 16);
  const int64_t norm = gguf_find_tensor(gguf.get(), "blk.0.ffn_norm.weight");
  ASSERT_GE(norm, 0);
  EXPECT_EQ(gguf_get_tensor_type(gguf.get(), norm), GGML_TYPE_F32);

  const int64_t last = gguf_get_n_tensors(gguf.get()) - 1;
  const uint64_t data_end = gguf_get_data_offset(gguf.get()) +
                            gguf_get_tensor_offset(gguf.get(), last) +
                            gguf_get_tensor_size(gguf.get(), last);
  EXPECT_EQ(fs::file_size(out), GGML_PAD(data_end, gguf_get_alignment(gguf.get())));
}

TEST(RandomGguf, TiedEmbeddingsLeaveOutOutputWeight) {
  ScratchDir scratch;
  const fs::path out = scratch.path() / "tied.gguf";
  ASSERT_EQ(run_random_gguf(kTinyShape + " --tied-embeddings --out " + out.string()).exit_code, 0);
  const auto gguf = read_gguf(out);
  ASSERT_NE(gguf, nullptr);
  EXPECT_LT(gguf_find_tensor(gguf.get(), "output.weight"), 0);
  EXPECT_GE(gguf_find_tensor(gguf.get(), "token_embd.weight"), 0);
}

TEST(RandomGguf, SameSeedGivesSameBytesWhateverTheThreadCount) {
  ScratchDir scratch;
  // The embedding table alone is 128256 rows of 64: eight tasks of ~1M values, so rows are split
  // among the threads in several batches.
  const std::string shape = "--layers 1 --hidden 64 --intermediate 128 --heads 4 --type q8_0";
  const fs::path one_thread = scratch.path() / "one.gguf";
  const fs::path two_threads = scratch.path() / "two.gguf";
  ASSERT_EQ(run_random_gguf(shape + " --threads 1 --out " + one_thread.string()).exit_code, 0);
  ASSERT_EQ(run_random_gguf(shape + " --threads 2 --out " + two_threads.string()).exit_code, 0);
  EXPECT_EQ(read_file(one_thread), read_file(two_threads));
}

TEST(RandomGguf, VocabSizeMismatchNamesTheOptionToChange) {
  ScratchDir scratch;
  const fs::path out = scratch.path() / "never.gguf";
  const CommandResult result =
      run_random_gguf(kTinyShape + " --vocab-size 32000 --out " + out.string());
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("--vocab-size 32000 does not match the 128256 tokens"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(RandomGguf, UnwritableOutNamesThePath) {
  const CommandResult result = run_random_gguf(kTinyShape + " --out /nonexistent-dir/x.gguf");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("cannot open --out /nonexistent-dir/x.gguf"), std::string::npos)
      << result.output;
}

}  // namespace
