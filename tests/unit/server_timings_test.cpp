// What brisk bench keeps of a server's own timings and cache reuse (brisk doctor's attribution).
#include <gtest/gtest.h>

#include "bench/completion_response.h"

namespace brisk::bench {
namespace {

TEST(ServerTimingsInRecord, BrisksTimingsOnTheUsageChunk) {
  RequestRecord record;
  read_stream_event(
      R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":16},)"
      R"("brisk_timings":{"queue_ms":0.4,"prefill_ms":55.1,"ttft_ms":55.5,"decode_ms":651.8}})",
      ApiKind::completions, Clock::now(), record);
  EXPECT_DOUBLE_EQ(record.server_ttft_ms, 55.5);
  EXPECT_DOUBLE_EQ(record.server_queue_ms, 0.4);
  EXPECT_EQ(record.cached_prompt_tokens, -1);
}

TEST(ServerTimingsInRecord, LlamaServersTimingsAndCachedTokens) {
  RequestRecord record;
  read_stream_event(
      R"({"choices":[{"text":"","index":0,"finish_reason":"length"}],)"
      R"("usage":{"completion_tokens":4,"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":3}},)"
      R"("timings":{"cache_n":3,"prompt_n":2,"prompt_ms":85.6,"predicted_ms":54.7}})",
      ApiKind::completions, Clock::now(), record);
  EXPECT_DOUBLE_EQ(record.server_ttft_ms, 85.6);
  EXPECT_EQ(record.server_queue_ms, -1);  // llama-server does not report its queue
  EXPECT_EQ(record.cached_prompt_tokens, 3);
}

TEST(ServerTimingsInRecord, OddValuesAreIgnored) {
  RequestRecord record;
  read_response_body(
      R"({"choices":[{"text":"x"}],"brisk_timings":{"ttft_ms":"fast","queue_ms":-3},)"
      R"("usage":{"prompt_tokens_details":{"cached_tokens":1e300}}})",
      ApiKind::completions, record);
  EXPECT_EQ(record.server_ttft_ms, -1);
  EXPECT_EQ(record.server_queue_ms, -1);
  EXPECT_EQ(record.cached_prompt_tokens, -1);
}

}  // namespace
}  // namespace brisk::bench
