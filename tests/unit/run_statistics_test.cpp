#include "bench/run_statistics.h"

#include <gtest/gtest.h>

namespace brisk::bench {
namespace {

using std::chrono::milliseconds;

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], q) for q = 0, 50, 90, 99, 100.
  const std::vector<double> sorted{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile_linear({42}, 99), 42.0);
}

TEST(Percentile, UnevenGapsInterpolateWithinTheirOwnInterval) {
  // The same vector as tests/integration/test_percentile.py pins bench/percentile.py on. Ranks
  // 1, 1.5, 2, 3.6, 3.96; nearest-rank would say 20, 20, 40, 160, 160.
  const std::vector<double> sorted{10, 20, 40, 80, 160};
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 25), 20.0);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 37.5), 30.0);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 50), 40.0);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 90), 128.0);
  EXPECT_DOUBLE_EQ(percentile_linear(sorted, 99), 156.8);
}

TEST(Summarize, HandComputedFromUnsortedSamples) {
  const LatencySummary s = summarize({100, 10, 90, 20, 80, 30, 70, 40, 60, 50});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.mean, 55.0);
  EXPECT_NEAR(s.std, 28.722813232690143, 1e-12);  // population std, numpy's default
  EXPECT_DOUBLE_EQ(s.p50, 55.0);                  // rank 4.5
  EXPECT_DOUBLE_EQ(s.p90, 91.0);                  // rank 8.1
  EXPECT_DOUBLE_EQ(s.p95, 95.5);                  // rank 8.55
  EXPECT_DOUBLE_EQ(s.p99, 99.1);                  // rank 8.91
  EXPECT_DOUBLE_EQ(s.max, 100.0);
}

TEST(Summarize, EmptyIsAllZero) {
  const LatencySummary s = summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.p99, 0.0);
}

// A scripted request: sent at `sent_ms`, content chunks at `chunk_ms`, ended at `end_ms`.
RequestRecord scripted(TimePoint zero, double sent_ms, std::vector<double> chunk_ms, double end_ms,
                       int prompt_tokens, int completion_tokens) {
  auto at = [zero](double ms) {
    return zero + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::milli>(ms));
  };
  RequestRecord record;
  record.scheduled = at(sent_ms);
  record.sent = at(sent_ms);
  for (const double ms : chunk_ms) record.content_chunks.push_back(at(ms));
  record.end = at(end_ms);
  record.prompt_tokens = prompt_tokens;
  record.completion_tokens = completion_tokens;
  record.http_status = 200;
  return record;
}

TEST(RunStatistics, ScriptedTimelineDefinitions) {
  const TimePoint zero = Clock::now();
  std::vector<RequestRecord> records;
  // 4 tokens in 4 chunks: TTFT 100, gaps 20/30/10, TPOT (170 - 100) / 3.
  records.push_back(scripted(zero, 0, {100, 120, 150, 160}, 170, 10, 4));
  // 3 tokens in 2 chunks (the server merged two): TTFT 50, gap 40, TPOT (100 - 50) / 2; and a
  // chunk/token mismatch.
  records.push_back(scripted(zero, 0, {50, 90}, 100, 20, 3));
  // One token: a TTFT, but no gap and no TPOT.
  records.push_back(scripted(zero, 1000, {1030}, 1040, 5, 1));
  // Excluded from every statistic: a warmup request and a timed-out one.
  RequestRecord warmup = scripted(zero, 0, {1, 2}, 3, 1, 2);
  warmup.warmup = true;
  records.push_back(warmup);
  RequestRecord timed_out = scripted(zero, 0, {500}, 1900, -1, -1);
  timed_out.error = RequestError::timeout;
  records.push_back(timed_out);
  RequestRecord refused = scripted(zero, 0, {}, 1, -1, -1);
  refused.error = RequestError::connect_refused;
  records.push_back(refused);

  const RunStatistics s = compute_run_statistics(records, zero, zero + milliseconds(2000));
  EXPECT_EQ(s.ok, 3);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.timeouts, 1);
  EXPECT_EQ(s.errors.at("timeout"), 1);
  EXPECT_EQ(s.errors.at("connect_refused"), 1);

  EXPECT_EQ(s.ttft_ms.count, 3u);
  EXPECT_NEAR(s.ttft_ms.mean, (100.0 + 50.0 + 30.0) / 3, 1e-6);
  EXPECT_NEAR(s.ttft_ms.max, 100.0, 1e-6);

  EXPECT_EQ(s.itl_ms.count, 4u);  // 20, 30, 10 and 40, pooled
  EXPECT_NEAR(s.itl_ms.mean, 25.0, 1e-6);
  EXPECT_NEAR(s.itl_ms.p50, 25.0, 1e-6);
  EXPECT_NEAR(s.itl_ms.max, 40.0, 1e-6);

  EXPECT_EQ(s.tpot_ms.count, 2u);
  EXPECT_NEAR(s.tpot_ms.mean, (70.0 / 3 + 25.0) / 2, 1e-6);

  EXPECT_EQ(s.e2e_ms.count, 3u);
  EXPECT_NEAR(s.e2e_ms.p50, 100.0, 1e-6);  // samples 170, 100, 40

  EXPECT_EQ(s.chunk_token_mismatch, 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 2.0);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.input_token_throughput, 35.0 / 2);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 8.0 / 2);
}

TEST(RunStatistics, ChunksOfOneReadAreCountedAsSameReadGaps) {
  const TimePoint zero = Clock::now();
  // Chunks at 10, 20, 20, 20, 35 ms: two gaps of 0 (three chunks in one read).
  const RunStatistics s = compute_run_statistics(
      {scripted(zero, 0, {10, 20, 20, 20, 35}, 35, 5, 5)}, zero, zero + milliseconds(100));
  EXPECT_EQ(s.itl_ms.count, 4u);
  EXPECT_EQ(s.itl_same_read_gaps, 2);
  EXPECT_DOUBLE_EQ(s.itl_ms.p50, 5.0);  // {0, 0, 10, 15}: kept, not hidden
}

TEST(RunStatistics, WithoutUsageTpotAndOutputTokensCountChunks) {
  const TimePoint zero = Clock::now();
  const RunStatistics s = compute_run_statistics(
      {scripted(zero, 0, {10, 20, 30}, 30, -1, -1), scripted(zero, 0, {10, 20}, 20, 7, 2)}, zero,
      zero + milliseconds(1000));
  EXPECT_EQ(s.tpot_ms.count, 2u);
  EXPECT_NEAR(s.tpot_ms.mean, 10.0, 1e-6);
  EXPECT_EQ(s.chunk_token_mismatch, 0);  // nothing to compare against
  // The server's count where it gave one, the chunks where not (once 0 tokens/s), said so.
  EXPECT_EQ(s.requests_without_usage, 1);
  EXPECT_EQ(s.total_output_tokens, 3 + 2);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 5.0);
  EXPECT_EQ(s.total_input_tokens, 7);
}

}  // namespace
}  // namespace brisk::bench
