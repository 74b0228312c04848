// brisk plan --workload TRACE: what a request trace says about the load to plan for.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/request_trace.h"
#include "plan/trace_summary.h"

namespace brisk::plan {
namespace {

const std::string kTraceDir = BRISK_REPO_DATA_DIR "/traces";

TraceRecord request(double arrival_s, int input_tokens, int output_tokens,
                    std::vector<uint64_t> hash_ids = {}, int block_tokens = 4) {
  TraceRecord record;
  record.arrival_s = arrival_s;
  record.input_tokens = input_tokens;
  record.output_tokens = output_tokens;
  record.hash_ids = std::move(hash_ids);
  record.block_tokens = record.hash_ids.empty() ? 0 : block_tokens;
  return record;
}

TEST(PlanTraceSummary, RateCountsTheGapsBetweenArrivals) {
  // Four requests a second apart: three gaps over three seconds, 1 request/s (4 / 3 would plan
  // a third more load than the trace offers).
  const std::vector<TraceRecord> steady = {request(0, 10, 1), request(1, 10, 1), request(2, 10, 1),
                                           request(3, 10, 1)};
  ASSERT_TRUE(arrival_rate_per_s(steady));
  EXPECT_DOUBLE_EQ(*arrival_rate_per_s(steady), 1.0);
  // The span, not the first arrival's offset: a trace that starts late has the same rate.
  const std::vector<TraceRecord> late = {request(10, 10, 1), request(10.5, 10, 1),
                                         request(11, 10, 1)};
  EXPECT_DOUBLE_EQ(*arrival_rate_per_s(late), 2.0);
  EXPECT_FALSE(arrival_rate_per_s({request(0, 10, 1)}));
  EXPECT_FALSE(arrival_rate_per_s({request(2, 10, 1), request(2, 10, 1)}));
}

TEST(PlanTraceSummary, SharingCountsTheLeadingBlocksAnEarlierRequestHad) {
  // Blocks of 4 tokens; the hashes are chained, so equal hashes mean equal prefixes.
  const std::vector<TraceRecord> records = {
      request(0, 8, 1, {1, 2}),      // first: nothing to share
      request(1, 10, 1, {1, 2, 3}),  // 8 tokens shared; its partial last block (2 tokens) is new
      request(2, 6, 1, {1, 9}),      // 4 shared, then a new block
      request(3, 6, 1, {7, 2}),      // starts new: no hit, though block 2 was seen (not a prefix)
      request(4, 2, 1, {1}),         // 2 tokens in a seen 4-token block: 2 shared, not 4
  };
  const auto fraction = prefix_sharing_ratio(records);
  ASSERT_TRUE(fraction);
  EXPECT_DOUBLE_EQ(*fraction, (0 + 8 + 4 + 0 + 2) / 32.0);
}

TEST(PlanTraceSummary, ARequestDoesNotShareWithItself) {
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio({request(0, 8, 1, {5, 5})}), 0.0);
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio({request(0, 8, 1, {5, 6}), request(1, 8, 1, {5, 6})}),
                   0.5);
}

TEST(PlanTraceSummary, SharingIsUnknownWithoutHashes) {
  // A request without hashes among hashed ones shares nothing; with no hashes at all, unknown.
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio({request(0, 8, 1, {1, 2}), request(1, 8, 1)}), 0.0);
  EXPECT_FALSE(prefix_sharing_ratio({request(0, 8, 1), request(1, 8, 1)}));
  // An empty prompt has no block to hash and says nothing either way.
  EXPECT_TRUE(prefix_sharing_ratio({request(0, 8, 1, {1, 2}), request(1, 0, 1)}));
  std::string error;
  const auto azure =
      read_trace_summary(kTraceDir + "/azure_sample.csv", TraceFormat::automatic, &error);
  ASSERT_TRUE(azure) << error;
  EXPECT_EQ(azure->format, TraceFormat::azure);
  EXPECT_FALSE(azure->prefix_shared_fraction);
}

TEST(PlanTraceSummary, LengthStatsAreBriskBenchsPercentiles) {
  std::vector<double> values;
  for (int i = 1; i <= 100; ++i) values.push_back(101 - i);  // unsorted on purpose
  const LengthStats stats = length_stats(values);
  EXPECT_DOUBLE_EQ(stats.mean, 50.5);
  EXPECT_DOUBLE_EQ(stats.p50, 50.5);
  EXPECT_NEAR(stats.p90, 90.1, 1e-9);
  EXPECT_NEAR(stats.p99, 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(stats.max, 100);
}

// The numbers of data/traces/mooncake_sample.jsonl, computed apart from brisk (Python, from the
// file's own fields): 24 requests from 215 ms to 5306 ms, 24349 of 33532 prompt tokens in
// blocks seen before.
TEST(PlanTraceSummary, MooncakeSample) {
  std::string error;
  const auto summary =
      read_trace_summary(kTraceDir + "/mooncake_sample.jsonl", TraceFormat::automatic, &error);
  ASSERT_TRUE(summary) << error;
  EXPECT_EQ(summary->format, TraceFormat::mooncake);
  EXPECT_EQ(summary->requests, 24);
  EXPECT_NEAR(summary->span_s, 5.091, 1e-9);
  EXPECT_NEAR(*summary->rate_per_s, 23 / 5.091, 1e-9);
  EXPECT_NEAR(summary->input_tokens.mean, 33532 / 24.0, 1e-9);
  EXPECT_DOUBLE_EQ(summary->input_tokens.p50, 995);
  EXPECT_DOUBLE_EQ(summary->input_tokens.max, 3042);
  EXPECT_NEAR(summary->output_tokens.mean, 379 / 24.0, 1e-9);
  ASSERT_TRUE(summary->prefix_shared_fraction);
  EXPECT_NEAR(*summary->prefix_shared_fraction, 24349 / 33532.0, 1e-12);
}

TraceSummary summary_of(std::vector<TraceRecord> records) {
  return summarize_trace(Trace{TraceFormat::brisk, std::move(records)}, "test.jsonl");
}

TEST(PlanTraceSummary, FillsWhatTheFlagsLeftOpen) {
  // Mean lengths 300 and 21 (20.5 rounds up), 2 requests/s, 3 of 4 blocks of the second prompt
  // shared: 100 of 600 prompt tokens -> 1/6 of the 300-token mean prompt, 50 tokens.
  TraceSummary trace =
      summary_of({request(0, 200, 20, {1, 2}, 100), request(0.5, 400, 21, {1, 3, 4, 5}, 100)});
  Workload workload;
  apply_trace_summary(trace, {}, workload);
  EXPECT_EQ(workload.input_tokens, 300);
  EXPECT_EQ(workload.output_tokens, 21);
  EXPECT_DOUBLE_EQ(workload.rate_per_s, 2.0);
  EXPECT_FALSE(workload.burst);
  EXPECT_EQ(workload.cached_prompt_tokens, 50);
  EXPECT_EQ(trace.used_for, (std::vector<std::string>{"input_tokens", "output_tokens", "rate",
                                                      "cached_prompt_tokens"}));

  // Flags given win; the sharing fraction still applies to the prompt the flags name.
  Workload flagged;
  flagged.input_tokens = 1200;
  flagged.concurrency = 4;
  apply_trace_summary(trace, {.input_tokens = true, .output_tokens = false, .load = true}, flagged);
  EXPECT_EQ(flagged.input_tokens, 1200);
  EXPECT_EQ(flagged.output_tokens, 21);
  EXPECT_EQ(flagged.concurrency, 4);
  EXPECT_DOUBLE_EQ(flagged.rate_per_s, 0);
  EXPECT_EQ(flagged.cached_prompt_tokens, 200);
  EXPECT_EQ(trace.used_for, (std::vector<std::string>{"output_tokens", "cached_prompt_tokens"}));
}

TEST(PlanTraceSummary, RequestsArrivingTogetherAreABurst) {
  TraceSummary trace = summary_of({request(0, 8, 4, {1, 2}), request(0, 8, 4, {1, 2}),
                                   request(0, 8, 4, {1, 2}), request(0, 8, 4, {1, 2})});
  Workload workload;
  apply_trace_summary(trace, {}, workload);
  EXPECT_FALSE(trace.rate_per_s);
  EXPECT_TRUE(workload.burst);
  EXPECT_EQ(workload.concurrency, 4);
  EXPECT_DOUBLE_EQ(workload.rate_per_s, 0);
  EXPECT_EQ(workload.cached_prompt_tokens, 6);  // 3 of 4 prompts hit whole: 3/4 of 8 tokens
}

TEST(PlanTraceSummary, APromptIsNeverServedFromTheCacheWhole) {
  // 15 of 16 identical prompts hit: 15/16 of 8 tokens rounds to 8, but the last prompt token's
  // logits pick the first output token, so it is always computed.
  std::vector<TraceRecord> records;
  for (int i = 0; i < 16; ++i) records.push_back(request(i, 8, 4, {1, 2}));
  TraceSummary trace = summary_of(records);
  Workload workload;
  apply_trace_summary(trace, {}, workload);
  EXPECT_EQ(workload.input_tokens, 8);
  EXPECT_EQ(workload.cached_prompt_tokens, 7);
  trace = summary_of({request(0, 1, 4, {1}), request(1, 1, 4, {1})});
  apply_trace_summary(trace, {}, workload);
  EXPECT_EQ(workload.input_tokens, 1);
  EXPECT_EQ(workload.cached_prompt_tokens, 0);
}

TEST(PlanTraceSummary, ABadLineIsNamedWithItsFileAndLine) {
  const std::string path = ::testing::TempDir() + "/plan_bad_trace.jsonl";
  {
    std::FILE* file = std::fopen(path.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("{\"arrival_s\": 0, \"input_tokens\": 5, \"output_tokens\": 1}\n", file);
    std::fputs("{\"arrival_s\": 1, \"input_tokens\": -5, \"output_tokens\": 1}\n", file);
    std::fclose(file);
  }
  std::string error;
  EXPECT_FALSE(read_trace_summary(path, TraceFormat::automatic, &error));
  EXPECT_NE(error.find(path + ":2:"), std::string::npos) << error;
  EXPECT_NE(error.find("input_tokens"), std::string::npos) << error;
}

}  // namespace
}  // namespace brisk::plan
