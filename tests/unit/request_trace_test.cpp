#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/trace_workload.h"
#include "common/request_trace.h"

namespace brisk {
namespace {

const std::string kDataDir = BRISK_REPO_DATA_DIR "/traces";

std::vector<int32_t> tokens(int count, int32_t first) {
  std::vector<int32_t> out(count);
  std::iota(out.begin(), out.end(), first);
  return out;
}

Trace parse_ok(const std::string& text, TraceFormat format = TraceFormat::automatic) {
  std::string error;
  auto trace = parse_trace(text, format, "t.jsonl", error);
  EXPECT_TRUE(trace) << error;
  return trace.value_or(Trace{});
}

std::string parse_error(const std::string& text, TraceFormat format = TraceFormat::automatic) {
  std::string error;
  EXPECT_FALSE(parse_trace(text, format, "t.jsonl", error)) << text;
  return error;
}

TEST(PrefixBlockHashes, EqualBlocksHashEqualAndADifferenceChangesEveryLaterHash) {
  std::vector<int32_t> a = tokens(200, 1);
  std::vector<int32_t> b = a;
  b[100] = 9999;  // in the second 64-token block
  const auto ha = prefix_block_hashes(a, 64);
  const auto hb = prefix_block_hashes(b, 64);
  ASSERT_EQ(ha.size(), 4u);  // 64 + 64 + 64 + 8
  ASSERT_EQ(hb.size(), 4u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);  // chained: the same third block after a different second one
  EXPECT_NE(ha[3], hb[3]);
  for (uint64_t h : ha) EXPECT_LE(h, kTraceHashMask);
}

TEST(PrefixBlockHashes, APartialLastBlockDiffersFromTheWholeOne) {
  const auto whole = prefix_block_hashes(tokens(128, 5), 64);
  const auto partial = prefix_block_hashes(tokens(100, 5), 64);
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(partial.size(), 2u);
  EXPECT_EQ(whole[0], partial[0]);
  EXPECT_NE(whole[1], partial[1]);
  EXPECT_TRUE(prefix_block_hashes({}, 64).empty());
}

TEST(RequestTrace, BriskLinesRoundTrip) {
  TraceRecord a;
  a.arrival_s = 1.5;
  a.endpoint = "chat";
  a.model = "gemma3-270m";
  a.input_tokens = 130;
  a.cached_tokens = 64;
  a.output_tokens = 12;
  a.max_tokens = 16;
  a.finish_reason = "length";
  a.priority = -2;
  a.session = "conversation-7";
  a.ttft_ms = 41.25;
  a.e2e_ms = 300.5;
  a.block_tokens = 64;
  a.hash_ids = prefix_block_hashes(tokens(130, 3), 64);
  TraceRecord b;
  b.arrival_s = 0.25;  // earlier: the reader sorts by arrival
  b.endpoint = "completions";
  b.input_tokens = 7;
  b.output_tokens = 0;
  b.finish_reason = "cancelled";
  b.block_tokens = 64;
  b.hash_ids = prefix_block_hashes(tokens(7, 3), 64);
  const Trace trace = parse_ok(trace_line(a) + "\n\n" + trace_line(b) + "\n");
  EXPECT_EQ(trace.format, TraceFormat::brisk);
  ASSERT_EQ(trace.records.size(), 2u);
  const TraceRecord& first = trace.records[0];
  const TraceRecord& second = trace.records[1];
  EXPECT_EQ(first.input_tokens, 7);
  EXPECT_EQ(first.arrival_s, 0);  // rebased on the first arrival
  EXPECT_EQ(first.cached_tokens, -1);
  EXPECT_FALSE(first.ttft_ms);
  EXPECT_FALSE(first.max_tokens);
  EXPECT_EQ(first.finish_reason, "cancelled");
  EXPECT_DOUBLE_EQ(second.arrival_s, 1.25);
  EXPECT_EQ(second.endpoint, "chat");
  EXPECT_EQ(second.model, "gemma3-270m");
  EXPECT_EQ(second.input_tokens, 130);
  EXPECT_EQ(second.cached_tokens, 64);
  EXPECT_EQ(second.output_tokens, 12);
  EXPECT_EQ(second.max_tokens, 16);
  EXPECT_EQ(second.priority, -2);
  EXPECT_EQ(second.session, "conversation-7");
  EXPECT_DOUBLE_EQ(*second.ttft_ms, 41.25);
  EXPECT_DOUBLE_EQ(*second.e2e_ms, 300.5);
  EXPECT_EQ(second.hash_ids, a.hash_ids);
  EXPECT_TRUE(second.prompt.empty());
  // The prompt's text is written only when there is one (--trace-text).
  EXPECT_EQ(nlohmann::json::parse(trace_line(a)).count("prompt"), 0u);
  a.prompt = "Hello";
  EXPECT_EQ(nlohmann::json::parse(trace_line(a))["prompt"], "Hello");
}

TEST(RequestTrace, TheMooncakeSampleReadsInSecondsWith512TokenBlocks) {
  std::string error;
  const auto trace = read_trace_file(kDataDir + "/mooncake_sample.jsonl", TraceFormat::automatic,
                                     error);
  ASSERT_TRUE(trace) << error;
  EXPECT_EQ(trace->format, TraceFormat::mooncake);
  ASSERT_EQ(trace->records.size(), 24u);
  EXPECT_EQ(trace->records[0].arrival_s, 0);
  EXPECT_NEAR(trace->records[1].arrival_s, 0.087, 1e-9);  // timestamps 215 and 302 ms
  EXPECT_EQ(trace->records[0].input_tokens, 885);
  EXPECT_EQ(trace->records[0].output_tokens, 5);
  EXPECT_EQ(trace->records[0].block_tokens, kMooncakeBlockTokens);
  EXPECT_EQ(trace->records[0].hash_ids, (std::vector<uint64_t>{0, 1}));
  for (const TraceRecord& record : trace->records) {
    EXPECT_LE(record.input_tokens, static_cast<int>(record.hash_ids.size()) * 512);
  }
}

TEST(RequestTrace, TheAzureSampleReadsItsTimestampsAsOffsets) {
  std::string error;
  const auto trace = read_trace_file(kDataDir + "/azure_sample.csv", TraceFormat::automatic, error);
  ASSERT_TRUE(trace) << error;
  EXPECT_EQ(trace->format, TraceFormat::azure);
  ASSERT_EQ(trace->records.size(), 24u);
  // 18:15:46.8215700 and 18:15:46.9339580
  EXPECT_NEAR(trace->records[1].arrival_s, 0.112388, 1e-6);
  EXPECT_EQ(trace->records[0].input_tokens, 174);
  EXPECT_EQ(trace->records[0].output_tokens, 6);
  EXPECT_TRUE(trace->records[0].hash_ids.empty());
  // A day boundary counts as one.
  const Trace across = parse_ok(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-12-31 23:59:59.5,10,2\n"
      "2024-01-01 00:00:00.25,20,3\n");
  EXPECT_NEAR(across.records[1].arrival_s, 0.75, 1e-9);
}

TEST(RequestTrace, BadLinesNameTheirLineAndField) {
  EXPECT_EQ(parse_error("{\"arrival_s\": 0, \"input_tokens\": 5, \"output_tokens\": 1}\n"
                        "{\"arrival_s\": 1, \"input_tokens\": -5, \"output_tokens\": 1}\n"),
            "t.jsonl:2: \"input_tokens\" must be between 0 and 16777216, got -5");
  EXPECT_EQ(parse_error("{\"arrival_s\": 0, \"output_tokens\": 1}\n"),
            "t.jsonl:1: no \"input_tokens\"");
  EXPECT_EQ(parse_error("{\"arrival_s\": 0, \"input_tokens\": 5, \"output_tokens\": 1}\nnot json\n"),
            "t.jsonl:2: not a JSON object");
  EXPECT_EQ(parse_error("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 2, "
                        "\"hash_ids\": [1, \"x\"]}\n"),
            "t.jsonl:1: \"hash_ids\" must hold whole numbers >= 0, got \"x\"");
  EXPECT_EQ(parse_error("{\"arrival_s\": 0, \"input_tokens\": 5, \"output_tokens\": 1, "
                        "\"hash_ids\": [1]}\n"),
            "t.jsonl:1: \"hash_ids\" needs \"block_tokens\" (the tokens each hash covers)");
  EXPECT_EQ(parse_error("{\"arrival_s\": -1, \"input_tokens\": 5, \"output_tokens\": 1}\n"),
            "t.jsonl:1: \"arrival_s\" must be a finite number >= 0, got -1");
  EXPECT_NE(parse_error("{\"prompt\": \"hi\"}\n").find("not a trace line of a known format"),
            std::string::npos);
  EXPECT_EQ(parse_error("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,12\n"),
            "t.jsonl:2: 2 fields, the header has 3");
  EXPECT_EQ(parse_error("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n"),
            "t.jsonl:2: TIMESTAMP 'yesterday' is neither 'YYYY-MM-DD HH:MM:SS.fff' nor seconds");
  EXPECT_EQ(parse_error("a,b\n1,2\n"),
            "t.jsonl:1: an Azure trace's header names TIMESTAMP, ContextTokens and "
            "GeneratedTokens; got 'a,b'");
  EXPECT_EQ(parse_error("\n\n"), "t.jsonl: empty trace");
  EXPECT_EQ(parse_error("TIMESTAMP,ContextTokens,GeneratedTokens\n"),
            "t.jsonl: the trace holds no request");
}

TEST(TraceReplay, TimeScaleAndMaxDurationChooseTheSchedule) {
  const Trace trace = parse_ok(
      "{\"arrival_s\": 0, \"input_tokens\": 5, \"output_tokens\": 1}\n"
      "{\"arrival_s\": 1, \"input_tokens\": 6, \"output_tokens\": 1}\n"
      "{\"arrival_s\": 3, \"input_tokens\": 7, \"output_tokens\": 1}\n");
  std::string error;
  auto half = bench::schedule_trace(trace, {0.5, std::nullopt}, error);
  ASSERT_TRUE(half) << error;
  EXPECT_EQ(half->offsets_s, (std::vector<double>{0, 0.5, 1.5}));
  auto cut = bench::schedule_trace(trace, {1.0, 2.0}, error);
  ASSERT_TRUE(cut) << error;
  EXPECT_EQ(cut->records.size(), 2u);
  EXPECT_FALSE(bench::schedule_trace(trace, {0, std::nullopt}, error));
  EXPECT_EQ(error, "--time-scale must be a number > 0, got 0");
}

TEST(TraceReplay, PromptsShareTokensExactlyWhereTheHashesRepeat) {
  TraceRecord a, b, c;
  a.input_tokens = 150;
  a.block_tokens = 64;
  a.hash_ids = {11, 12, 13};
  b = a;
  b.input_tokens = 140;
  b.hash_ids = {11, 12, 99};  // the same first two blocks, then its own
  c.input_tokens = 90;         // no hashes (an Azure trace): nothing shared
  bench::TokenCalibration calibration;
  std::vector<int> pool(64);
  std::iota(pool.begin(), pool.end(), 1000);
  const bench::TraceWorkload workload({a, b, c}, "m", pool, calibration, 2, 7, true, {});
  ASSERT_TRUE(workload.exact_lengths());
  const auto pa = workload.prompt_ids(a, 0);
  const auto pb = workload.prompt_ids(b, 1);
  const auto pc = workload.prompt_ids(c, 2);
  ASSERT_EQ(pa.size(), 150u);
  ASSERT_EQ(pb.size(), 140u);
  ASSERT_EQ(pc.size(), 90u);
  EXPECT_TRUE(std::equal(pa.begin(), pa.begin() + 128, pb.begin()));
  EXPECT_FALSE(std::equal(pa.begin() + 128, pa.begin() + 140, pb.begin() + 128));
  EXPECT_FALSE(std::equal(pc.begin(), pc.begin() + 16, pa.begin()));
  for (int id : pa) EXPECT_TRUE(id >= 1000 && id < 1064);
  // The same record under another request index keeps its hashed blocks and draws a new tail.
  TraceRecord tail_only = a;
  tail_only.hash_ids.clear();
  EXPECT_NE(workload.prompt_ids(tail_only, 0), workload.prompt_ids(tail_only, 1));
  // Request 2 (after the two warmup requests) sends record 0 with its output length.
  const auto body = nlohmann::json::parse(workload.request(0, 2).body);
  EXPECT_EQ(body["prompt"].size(), 150u);
  EXPECT_EQ(body["max_tokens"], 1);  // a record that generated nothing still asks for a token
  EXPECT_EQ(body["ignore_eos"], true);
  const auto warmup = nlohmann::json::parse(workload.request(0, 0).body);
  EXPECT_EQ(warmup["prompt"].size(), 16u);
}

TEST(TraceReplay, WithoutATokenizerPromptsAreFillerWordsSharedTheSameWay) {
  TraceRecord a;
  a.input_tokens = 130;
  a.block_tokens = 64;
  a.hash_ids = {1, 2, 3};
  TraceRecord b = a;
  b.hash_ids = {1, 5, 6};
  bench::TokenCalibration calibration;
  calibration.tokens_per_word = 1.0;
  const bench::TraceWorkload workload({a, b}, "m", {}, calibration, 0, 7, true, {});
  EXPECT_FALSE(workload.exact_lengths());
  const std::string ta = workload.prompt_text(a, 0);
  const std::string tb = workload.prompt_text(b, 1);
  // 64 words per block: the first block's text is common, the second's is not.
  size_t common = 0;
  while (common < ta.size() && common < tb.size() && ta[common] == tb[common]) ++common;
  const auto words_in = [](const std::string& text, size_t n) {
    return std::count(text.begin(), text.begin() + static_cast<long>(n), ' ');
  };
  EXPECT_GE(words_in(ta, common), 64);
  EXPECT_LT(words_in(ta, common), 70);
  EXPECT_EQ(std::count(ta.begin(), ta.end(), ' '), 130);
}

}  // namespace
}  // namespace brisk
