// The host tier's save and restore (Engine::save_sequence, restore_sequence) on a real model:
// what is restored is bit for bit what was saved, and it continues the text exactly as the
// original sequence does. Skipped when the test model is not pulled (make test-models).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/model_store.h"
#include "engine/engine.h"

namespace brisk {
namespace {

std::unique_ptr<Engine> load_test_model(int ctx_size = 1024) {
  const ResolveResult model = ModelStore::from_environment().resolve("smollm2-135m");
  if (!model.ok()) return nullptr;
  EngineOptions options;
  options.model_path = model.path.string();
  options.ctx_size = ctx_size;
  options.max_seqs = 4;
  options.max_batched_tokens = 256;
  options.threads = 2;
  std::string error;
  auto engine = Engine::load(options, &error);
  EXPECT_TRUE(engine) << error;
  return engine;
}

// Decodes `tokens` into `sequence` from position `first`; the logits of the last one.
std::vector<float> decode(Engine& engine, const TokenList& tokens, int sequence, int first) {
  engine.clear_batch();
  int last = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    last = engine.add_to_batch(tokens[i], first + static_cast<int>(i), sequence,
                               i + 1 == tokens.size());
  }
  EXPECT_EQ(engine.decode(), DecodeStatus::ok);
  const float* logits = engine.logits(last);
  return {logits, logits + engine.vocabulary_size()};
}

TEST(EngineState, ARestoredSequenceIsWhatWasSavedAndContinuesTheSame) {
  auto engine = load_test_model();
  if (!engine) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  const TokenList prompt = engine->tokenize(
      "The river valley was settled by farmers who grew wheat and barley along its banks.", true);
  ASSERT_GT(prompt.size(), 12u);
  decode(*engine, prompt, 0, 0);
  const std::vector<uint8_t> saved = engine->save_sequence(0);
  ASSERT_FALSE(saved.empty());

  // Freed and restored (into the same id: the state names its sequence), it saves the same bytes.
  engine->release_sequence(0);
  ASSERT_TRUE(engine->restore_sequence(0, saved, static_cast<int>(prompt.size())));
  EXPECT_EQ(engine->save_sequence(0), saved) << "restored bytes differ from the saved ones";

  ASSERT_TRUE(engine->restore_sequence(1, saved, static_cast<int>(prompt.size())));

  // The next token decoded alone on each: the same logits, bit for bit.
  const TokenList next = engine->tokenize(" Later", false);
  const std::vector<float> original = decode(*engine, next, 0, static_cast<int>(prompt.size()));
  const std::vector<float> restored = decode(*engine, next, 1, static_cast<int>(prompt.size()));
  ASSERT_EQ(original.size(), restored.size());
  EXPECT_EQ(std::memcmp(original.data(), restored.data(), original.size() * sizeof(float)), 0);

  // Restored to a shorter prefix, it holds only that prefix: a save of it is smaller, and it
  // continues from there as a sequence that computed only the prefix.
  const int keep = static_cast<int>(prompt.size()) - 5;
  ASSERT_TRUE(engine->restore_sequence(2, saved, keep));
  EXPECT_LT(engine->save_sequence(2).size(), saved.size());
  const TokenList tail(prompt.begin() + keep, prompt.end());
  const std::vector<float> continued = decode(*engine, tail, 2, keep);
  engine->release_sequence(3);
  const std::vector<float> computed = decode(*engine, prompt, 3, 0);
  ASSERT_EQ(continued.size(), computed.size());
  float largest_gap = 0;
  for (size_t i = 0; i < continued.size(); ++i) {
    largest_gap = std::max(largest_gap, std::abs(continued[i] - computed[i]));
  }
  // Not bit for bit: the last five tokens are one batch here and part of a longer one there.
  EXPECT_LT(largest_gap, 0.05f);
}

TEST(EngineState, ARestoreWithoutRoomFailsAndLeavesTheSequenceEmpty) {
  auto engine = load_test_model(256);
  if (!engine) GTEST_SKIP() << "smollm2-135m is not pulled (make test-models)";
  TokenList prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(100 + i);
  decode(*engine, prompt, 0, 0);
  const std::vector<uint8_t> saved = engine->save_sequence(0);
  // 150 cells held by sequence 0 and 256 in all: a second copy does not fit.
  EXPECT_FALSE(engine->restore_sequence(1, saved, 150));
  EXPECT_TRUE(engine->save_sequence(1).size() < saved.size() / 10) << "nothing kept";
  engine->release_sequence(0);
  EXPECT_TRUE(engine->restore_sequence(1, saved, 150));
}

}  // namespace
}  // namespace brisk
