// How a step's batch is cut into llama_decode calls for ggml-cpu's per-row flash attention
// (engine/attention_calls.h), on made-up batches.
#include "engine/attention_calls.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace brisk {
namespace {

// `decodes` single rows (sequences 0..decodes-1), then chunks of the given sizes.
std::vector<int> batch(int decodes, std::vector<int> chunks = {}) {
  std::vector<int> rows(static_cast<size_t>(decodes));
  std::iota(rows.begin(), rows.end(), 0);
  int sequence = decodes;
  for (const int size : chunks) rows.insert(rows.end(), static_cast<size_t>(size), sequence++);
  return rows;
}

std::vector<std::pair<int, int>> calls(const std::vector<int>& rows, int max_rows = 63) {
  std::vector<std::pair<int, int>> out;
  for (const AttentionCall& call : plan_attention_calls(rows, max_rows)) {
    out.emplace_back(call.first, call.rows);
  }
  return out;
}

using Calls = std::vector<std::pair<int, int>>;

TEST(AttentionCalls, ABatchThatTakesThePerRowKernelAnywayIsOneCall) {
  EXPECT_EQ(calls(batch(63)), (Calls{{0, 63}}));
  EXPECT_EQ(calls(batch(16, {47})), (Calls{{0, 63}}));
  EXPECT_EQ(calls(batch(1)), (Calls{{0, 1}}));
}

TEST(AttentionCalls, OffMeansOneCallWhateverTheBatch) {
  EXPECT_EQ(calls(batch(128), 0), (Calls{{0, 128}}));
  EXPECT_EQ(calls(batch(20, {300}), 0), (Calls{{0, 320}}));
}

TEST(AttentionCalls, DecodesAreCutIntoBalancedCallsUnderSixtyFourRows) {
  EXPECT_EQ(calls(batch(64)), (Calls{{0, 32}, {32, 32}}));
  EXPECT_EQ(calls(batch(128)), (Calls{{0, 42}, {42, 43}, {85, 43}}));
  EXPECT_EQ(calls(batch(100), 32), (Calls{{0, 25}, {25, 25}, {50, 25}, {75, 25}}));
}

TEST(AttentionCalls, APromptChunkOfSixtyFourRowsOrMoreRunsFirstInACallOfItsOwn) {
  // The chunk keeps the tiled kernel; the decodes' logits come last, from llama.cpp's buffer.
  EXPECT_EQ(calls(batch(16, {64})), (Calls{{16, 64}, {0, 16}}));
  EXPECT_EQ(calls(batch(70, {100, 30})), (Calls{{70, 130}, {0, 35}, {35, 35}}));
  // Only prompt chunks: one call, as before.
  EXPECT_EQ(calls(batch(0, {200, 56})), (Calls{{0, 256}}));
}

TEST(AttentionCalls, AShortChunkJoinsThePerRowCalls) {
  EXPECT_EQ(calls(batch(60, {20})), (Calls{{0, 40}, {40, 40}}));
}

TEST(AttentionCalls, AOneTokenChunkAmongTheDecodesCountsAsADecode) {
  // 70 decodes, then a prompt's last token (sequence 70): one row too.
  std::vector<int> rows = batch(70);
  rows.push_back(70);
  EXPECT_EQ(calls(rows), (Calls{{0, 35}, {35, 36}}));
}

}  // namespace
}  // namespace brisk
