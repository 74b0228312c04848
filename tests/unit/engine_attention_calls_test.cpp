// Engine::decode cutting a step into several llama_decode calls (engine/attention_calls.h) on a
// real model: the logits of every row are those of one call, and a call that finds no room
// leaves nothing of the batch behind. Skipped when the test model is not pulled.
#include <gtest/gtest.h>

#include <vector>

#include "common/model_store.h"
#include "engine/engine.h"

namespace brisk {
namespace {

constexpr int kSequences = 70;  // decodes a step: more than one per-row call holds
constexpr int kPromptTokens = 3;

std::unique_ptr<Engine> load(int cpu_attention_rows, int ctx_size) {
  const ResolveResult model = ModelStore::from_environment().resolve("smollm2-135m");
  if (!model.ok()) return nullptr;
  EngineOptions options;
  options.model_path = model.path.string();
  options.ctx_size = ctx_size;
  options.max_seqs = kSequences + 1;  // and one for a prompt chunk
  options.max_batched_tokens = 256;
  options.threads = 2;
  options.cpu_attention_rows = cpu_attention_rows;
  std::string error;
  auto engine = Engine::load(options, &error);
  EXPECT_TRUE(engine) << error;
  return engine;
}

Token prompt_token(int sequence, int i) { return 200 + 37 * sequence + 11 * i; }

// Every sequence's prompt in one batch (one call: no single rows).
void put_prompts(Engine& engine) {
  engine.clear_batch();
  for (int s = 0; s < kSequences; ++s) {
    for (int i = 0; i < kPromptTokens; ++i) engine.add_to_batch(prompt_token(s, i), i, s, false);
  }
  ASSERT_EQ(engine.decode(), DecodeStatus::ok);
}

// One decode row per sequence, then `chunk` prompt tokens of a new sequence (logits for its last).
DecodeStatus decode_step(Engine& engine, int chunk = 0) {
  engine.clear_batch();
  for (int s = 0; s < kSequences; ++s) engine.add_to_batch(1000 + s, kPromptTokens, s, true);
  for (int i = 0; i < chunk; ++i) engine.add_to_batch(300 + i, i, kSequences, i + 1 == chunk);
  return engine.decode();
}

std::vector<float> logits_of(Engine& engine, int row) {
  const float* logits = engine.logits(row);
  return {logits, logits + engine.vocabulary_size()};
}

// 70 decodes and a 64-token prompt chunk: the chunk's call runs first (its logits copied out),
// then two calls of 35 decodes. Every row's logits are, bit for bit, those of its tokens in calls
// grouped otherwise: a decode no longer depends on what else the step carries. (In one call of
// 134 rows the tiled kernel's sums differed from a decode alone by up to 1.0 logit.)
TEST(EngineAttentionCalls, ADecodesLogitsDoNotDependOnWhatElseTheStepCarries) {
  auto split = load(63, 1024);
  if (!split) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  auto alone = load(0, 1024);
  constexpr int kChunk = 64;
  put_prompts(*split);
  put_prompts(*alone);
  ASSERT_EQ(decode_step(*split, kChunk), DecodeStatus::ok);

  alone->clear_batch();
  for (int i = 0; i < kChunk; ++i) alone->add_to_batch(300 + i, i, kSequences, i + 1 == kChunk);
  ASSERT_EQ(alone->decode(), DecodeStatus::ok);
  EXPECT_EQ(logits_of(*split, kSequences + kChunk - 1), logits_of(*alone, kChunk - 1))
      << "the prompt chunk";
  // The decodes in other groups of other sizes (one row alone would take ggml's split-KV path
  // from 512 cells, which sums in another order).
  for (const auto& [first, rows] : {std::pair{0, 10}, std::pair{10, 60}}) {
    alone->clear_batch();
    for (int s = first; s < first + rows; ++s) alone->add_to_batch(1000 + s, kPromptTokens, s, true);
    ASSERT_EQ(alone->decode(), DecodeStatus::ok);
    for (int s = first; s < first + rows; ++s) {
      EXPECT_EQ(logits_of(*split, s), logits_of(*alone, s - first)) << "the decode of sequence " << s;
    }
  }
}

TEST(EngineAttentionCalls, ACallWithoutRoomTakesTheEarlierCallsCellsOutAgain) {
  // 256 cells: the prompts take 210, the first call of 35 decodes fits, the second does not.
  auto engine = load(63, 256);
  if (!engine) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  put_prompts(*engine);
  ASSERT_EQ(decode_step(*engine), DecodeStatus::no_kv_space);
  // Each sequence holds its prompt only: position 3 is its next one. Had the first call's cells
  // stayed, llama.cpp would refuse the batch as out of order.
  engine->clear_batch();
  for (int s = 0; s < 30; ++s) engine->add_to_batch(1000 + s, kPromptTokens, s, true);
  EXPECT_EQ(engine->decode(), DecodeStatus::ok);
}

}  // namespace
}  // namespace brisk
