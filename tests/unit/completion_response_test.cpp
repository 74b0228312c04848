#include "bench/completion_response.h"

#include <gtest/gtest.h>

#include <string>

namespace brisk::bench {
namespace {

RequestRecord read_body(const std::string& body, ApiKind kind = ApiKind::chat) {
  RequestRecord record;
  read_response_body(body, kind, record);
  return record;
}

}  // namespace

TEST(CompletionResponse, AnEmbeddingsAnswerCountsItsVectorsAndPromptTokens) {
  RequestRecord record;
  record.embedding_inputs = 2;
  read_response_body(
      R"({"object":"list","data":[{"index":0,"embedding":"AAA="},{"index":1,"embedding":[0.5]}],
          "usage":{"prompt_tokens":20,"total_tokens":20}})",
      ApiKind::embeddings, record);
  EXPECT_TRUE(record.ok()) << record.error_detail;
  EXPECT_EQ(record.embeddings, 2);
  EXPECT_EQ(record.prompt_tokens, 20);
  EXPECT_EQ(record.completion_tokens, 0);  // generates nothing: not "a server without usage"

  RequestRecord short_answer;
  short_answer.embedding_inputs = 3;
  read_response_body(R"({"data":[{"index":0,"embedding":[1]}]})", ApiKind::embeddings,
                     short_answer);
  EXPECT_FALSE(short_answer.ok());
  EXPECT_NE(short_answer.error_detail.find("1 vectors came back for 3 inputs"), std::string::npos);
}

TEST(CompletionResponse, ReadsUsageAndContentOfAStreamChunk) {
  RequestRecord record;
  read_stream_event(R"({"choices":[{"index":0,"delta":{"content":"Red"}}]})", ApiKind::chat,
                    Clock::now(), record);
  read_stream_event(R"({"choices":[],"usage":{"prompt_tokens":14,"completion_tokens":3}})",
                    ApiKind::chat, Clock::now(), record);
  EXPECT_TRUE(record.ok());
  EXPECT_EQ(record.content_chunks.size(), 1u);
  EXPECT_EQ(record.prompt_tokens, 14);
  EXPECT_EQ(record.completion_tokens, 3);
}

// A chat session resends the answer: its visible text, in order, and not the reasoning.
TEST(CompletionResponse, KeepsTheAnswersContentOnlyWhenAsked) {
  const char* events[] = {R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})",
                          R"({"choices":[{"delta":{"content":"Red"}}]})",
                          R"({"choices":[{"delta":{"content":" and blue"}}]})"};
  RequestRecord kept, not_kept;
  kept.keep_answer = true;
  for (const char* event : events) {
    read_stream_event(event, ApiKind::chat, Clock::now(), kept);
    read_stream_event(event, ApiKind::chat, Clock::now(), not_kept);
  }
  EXPECT_EQ(kept.answer, "Red and blue");
  EXPECT_EQ(kept.content_chunks.size(), 3u);  // reasoning is still a token the user waits for
  EXPECT_EQ(not_kept.answer, "");
  RequestRecord whole;
  whole.keep_answer = true;
  read_response_body(R"({"choices":[{"text":" a whole answer"}]})", ApiKind::completions, whole);
  EXPECT_EQ(whole.answer, " a whole answer");
}

// Caught by tests/fuzz/bench_response_fuzzer: json::value threw type_error on a string count, out
// of the request's coroutine and brisk bench's io_context (the run aborted), and a count of 1e300
// was converted to int (undefined behaviour).
TEST(CompletionResponse, ATokenCountThatIsNoCountIsNotReported) {
  for (const char* usage :
       {R"("12")", "1e300", "-5", "2.5", "4294967296", "18446744073709551615", "null", "[1]"}) {
    SCOPED_TRACE(usage);
    const RequestRecord record =
        read_body(std::string(R"({"choices":[],"usage":{"prompt_tokens":)") + usage +
                  R"(,"completion_tokens":7}})");
    EXPECT_TRUE(record.ok());
    EXPECT_EQ(record.prompt_tokens, -1);
    EXPECT_EQ(record.completion_tokens, 7);
  }
}

// Caught by tests/fuzz/bench_response_fuzzer: the message of an error without one was its dump,
// which recurses once per level, and a server's deeply nested error overflowed the stack.
TEST(CompletionResponse, AnErrorOfAnyShapeFailsTheRecordWithWhatTheServerSent) {
  const int depth = 1'000'000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  const RequestRecord record = read_body(R"({"error":)" + nested + "}");
  EXPECT_EQ(record.error, RequestError::stream_error);
  EXPECT_EQ(record.error_detail, "an error without a message: {\"error\":" + nested.substr(0, 191));

  EXPECT_EQ(read_body(R"({"error":"overloaded"})").error_detail, "overloaded");
  EXPECT_EQ(read_body(R"({"error":{"message":"no such model","code":404}})").error_detail,
            "no such model");
}

TEST(CompletionResponse, ABodyThatIsNoObjectIsMalformed) {
  EXPECT_EQ(read_body("[1,2]").error, RequestError::malformed_sse);
  EXPECT_EQ(read_body("").error, RequestError::malformed_sse);
  RequestRecord record;
  read_stream_event("not json", ApiKind::completions, Clock::now(), record);
  EXPECT_EQ(record.error, RequestError::malformed_sse);
  EXPECT_EQ(record.error_detail, "not JSON: not json");
}

}  // namespace brisk::bench
