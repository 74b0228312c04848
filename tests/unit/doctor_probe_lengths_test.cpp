// brisk doctor --workload: the probe's lengths and prefix sharing taken from a request trace
// (doctor/probe_lengths.h, common/request_trace.h's prefix_sharing_ratio), on hand-made traces
// whose answers are worked out below, and on the samples in data/traces/.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/request_trace.h"
#include "doctor/probe_lengths.h"

namespace brisk::doctor {
namespace {

const std::string kTraceDir = BRISK_REPO_DATA_DIR "/traces";

TraceRecord request(int input_tokens, int output_tokens, std::vector<uint64_t> hash_ids = {},
                    int block_tokens = 16) {
  TraceRecord record;
  record.input_tokens = input_tokens;
  record.output_tokens = output_tokens;
  record.hash_ids = std::move(hash_ids);
  record.block_tokens = record.hash_ids.empty() ? 0 : block_tokens;
  return record;
}

Trace read_sample(const std::string& name) {
  std::string error;
  auto trace = read_trace_file(kTraceDir + "/" + name, TraceFormat::automatic, error);
  EXPECT_TRUE(trace) << error;
  return trace.value_or(Trace{});
}

TEST(PrefixSharingRatio, CountsTheTokensOfBlocksAnEarlierRequestHad) {
  // 40 tokens each in 16-token blocks (16, 16, 8): the second shares its first two blocks (32
  // tokens) with the first; the third shares all three (40) with the first. 72 of 120.
  const std::vector<TraceRecord> records = {request(40, 1, {1, 2, 3}), request(40, 1, {1, 2, 9}),
                                            request(40, 1, {1, 2, 3})};
  ASSERT_TRUE(prefix_sharing_ratio(records));
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio(records), 72.0 / 120.0);
}

TEST(PrefixSharingRatio, APartialLastBlockCountsOnlyItsTokens) {
  // 20 tokens: a block of 16 and one of 4. The repeat shares 20, not 32, of the 40.
  const std::vector<TraceRecord> records = {request(20, 1, {1, 2}), request(20, 1, {1, 2})};
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio(records), 20.0 / 40.0);
}

TEST(PrefixSharingRatio, TokensPastTheHashesAndRequestsWithoutHashesShareNothing) {
  // The second hashes only its first block (16 of its 50 tokens); the third has no hashes.
  const std::vector<TraceRecord> records = {request(16, 1, {7}), request(50, 1, {7}),
                                            request(34, 1)};
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio(records), 16.0 / 100.0);
}

TEST(PrefixSharingRatio, OnlyEarlierRequestsCount) {
  // The first request of a pair never shares: whatever it holds, nothing came before it.
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio({request(32, 1, {4, 5})}), 0.0);
  EXPECT_DOUBLE_EQ(*prefix_sharing_ratio({request(32, 1, {4, 5}), request(32, 1, {6, 7})}), 0.0);
}

TEST(PrefixSharingRatio, UnknownWithoutAnyHashes) {
  EXPECT_FALSE(prefix_sharing_ratio({request(30, 2), request(40, 3)}));
  EXPECT_FALSE(prefix_sharing_ratio({}));
  EXPECT_FALSE(prefix_sharing_ratio(read_sample("azure_sample.csv").records));
}

TEST(PrefixSharingRatio, TheMooncakeSample) {
  // Worked out from the file: 24,349 of its 33,532 prompt tokens are in 512-token blocks an
  // earlier request had.
  const auto ratio = prefix_sharing_ratio(read_sample("mooncake_sample.jsonl").records);
  ASSERT_TRUE(ratio);
  EXPECT_NEAR(*ratio, 24349.0 / 33532.0, 1e-12);
}

TEST(DoctorProbeLengths, LengthsAreTheTracesMedianAndNinetiethPercentile) {
  // Inputs 10, 20, ..., 100: p50 55, p90 91 (numpy's linear percentile). Outputs 1..10: p50 5.5,
  // rounded away from zero to 6.
  Trace trace;
  trace.format = TraceFormat::brisk;
  for (int i = 1; i <= 10; ++i) trace.records.push_back(request(10 * i, i));
  const ProbeLengths workload = probe_lengths_from_trace(trace, "hand.jsonl");
  EXPECT_EQ(workload.short_input_tokens, 55);
  EXPECT_EQ(workload.long_input_tokens, 91);
  EXPECT_EQ(workload.short_output_tokens, 6);
  EXPECT_EQ(workload.long_output_tokens, 6);
  EXPECT_EQ(workload.mixed_short_output_tokens, 6);
  EXPECT_TRUE(workload.from_trace());
  EXPECT_EQ(workload.trace_path, "hand.jsonl");
  EXPECT_EQ(workload.trace_format, "brisk");
  EXPECT_EQ(workload.trace_requests, 10u);
  // No hashes: the sharing is unknown and the probe keeps its default.
  EXPECT_FALSE(workload.trace_prefix_sharing);
  EXPECT_DOUBLE_EQ(workload.shared_prefix_fraction, ProbeLengths{}.shared_prefix_fraction);
}

TEST(DoctorProbeLengths, TheRepeatedPrefixProbeSharesWhatTheTraceShares) {
  Trace trace;
  trace.records = {request(40, 4, {1, 2, 3}), request(40, 4, {1, 2, 9}), request(40, 4, {1, 2, 3})};
  const ProbeLengths workload = probe_lengths_from_trace(trace, "shared.jsonl");
  ASSERT_TRUE(workload.trace_prefix_sharing);
  EXPECT_DOUBLE_EQ(*workload.trace_prefix_sharing, 0.6);
  EXPECT_DOUBLE_EQ(workload.shared_prefix_fraction, 0.6);

  // A trace whose prompts share nothing: the probe skips the repeated prefix (fraction 0).
  trace.records = {request(40, 4, {1, 2, 3}), request(40, 4, {4, 5, 6})};
  EXPECT_DOUBLE_EQ(probe_lengths_from_trace(trace, "unique.jsonl").shared_prefix_fraction, 0.0);
}

TEST(DoctorProbeLengths, LengthsStayWithinWhatTheFlagsAccept) {
  // Prompts of 2 tokens and answers of 0 (cancelled requests): the short probe still sends 4
  // tokens (--short-input-tokens' least), the long one 16, and every answer asks for 1.
  Trace trace;
  trace.records = {request(2, 0), request(2, 0), request(3, 0)};
  const ProbeLengths workload = probe_lengths_from_trace(trace, "tiny.jsonl");
  EXPECT_EQ(workload.short_input_tokens, 4);
  EXPECT_EQ(workload.long_input_tokens, 16);
  EXPECT_EQ(workload.short_output_tokens, 1);
}

TEST(DoctorProbeLengths, TheMooncakeSampleAndWhatTheReportSays) {
  // Its 24 inputs sorted hold 901 and 1089 at the middle (p50 995) and 2686 and 2955 around rank
  // 20.7 (p90 2874.3); its outputs 16 and 17 at the middle (p50 16.5, rounded to 17).
  const ProbeLengths workload =
      probe_lengths_from_trace(read_sample("mooncake_sample.jsonl"), "mooncake_sample.jsonl");
  EXPECT_EQ(workload.short_input_tokens, 995);
  EXPECT_EQ(workload.long_input_tokens, 2874);
  EXPECT_EQ(workload.short_output_tokens, 17);
  EXPECT_NEAR(workload.shared_prefix_fraction, 24349.0 / 33532.0, 1e-12);
  const std::string line = describe_probe_lengths(workload);
  EXPECT_NE(line.find("mooncake trace mooncake_sample.jsonl (24 requests"), std::string::npos)
      << line;
  EXPECT_NE(line.find("short prompts 995 tokens in, 17 out; long prompts 2874 in"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("repeated prefix 73%"), std::string::npos) << line;
}

TEST(DoctorProbeLengths, WithoutATraceTheLineSaysSynthetic) {
  EXPECT_EQ(describe_probe_lengths(ProbeLengths{})
                .rfind("synthetic prompts: short prompts 32 "
                       "tokens in, 16 out; long prompts 320 in",
                       0),
            0u);
}

}  // namespace
}  // namespace brisk::doctor
