#include "server/completion_params.h"

#include <gtest/gtest.h>

namespace brisk {
namespace {

ApiError expect_error(std::string_view body, CompletionKind kind = CompletionKind::text) {
  auto parsed = parse_completion_params(body, kind);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed)) << body;
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

CompletionParams expect_params(std::string_view body, CompletionKind kind = CompletionKind::text) {
  auto parsed = parse_completion_params(body, kind);
  if (auto* error = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << error->message;
  return std::holds_alternative<CompletionParams>(parsed) ? std::get<CompletionParams>(parsed)
                                                          : CompletionParams{};
}

}  // namespace

TEST(CompletionParams, ReadsEverySupportedField) {
  CompletionParams params = expect_params(
      R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0,"top_p":0.9,"top_k":40,
          "min_p":0.05,"seed":3,"stop":["a","b"],"stream":true,
          "stream_options":{"include_usage":true},"n":1,"ignore_eos":true})");
  EXPECT_EQ(params.model, "m");
  EXPECT_EQ(params.prompt, "hi");
  EXPECT_EQ(params.max_tokens, 7);
  EXPECT_FLOAT_EQ(params.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(params.sampling.top_p, 0.9f);
  EXPECT_EQ(params.sampling.top_k, 40);
  EXPECT_EQ(params.sampling.seed, 3u);
  EXPECT_EQ(params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(params.stream);
  EXPECT_TRUE(params.include_usage);
  EXPECT_TRUE(params.ignore_eos);
}

TEST(CompletionParams, ReadsChatMessagesAndTextParts) {
  CompletionParams params = expect_params(
      R"({"messages":[{"role":"developer","content":"be brief"},
                      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
          "max_completion_tokens":5,"stop":"x"})",
      CompletionKind::chat);
  ASSERT_EQ(params.messages.size(), 2u);
  EXPECT_EQ(params.messages[0].role, "system");
  EXPECT_EQ(params.messages[1].content, "hi there");
  EXPECT_EQ(params.max_tokens, 5);
  EXPECT_EQ(params.stop, (std::vector<std::string>{"x"}));
}

TEST(CompletionParams, AcceptsTokenIdPrompts) {
  CompletionParams params = expect_params(R"({"prompt":[2,100,200]})");
  ASSERT_TRUE(params.prompt_tokens.has_value());
  EXPECT_EQ(*params.prompt_tokens, (TokenList{2, 100, 200}));
}

TEST(CompletionParams, RejectsBadInputWithTheFieldNamed) {
  EXPECT_EQ(expect_error("{not json").message, "the request body is not valid JSON");
  EXPECT_EQ(expect_error("[1,2]").message, "the request body must be a JSON object");
  EXPECT_EQ(expect_error("{\"prompt\":\"\xC3\x28\"}").message,
            "the request body is not valid UTF-8");
  EXPECT_EQ(expect_error(R"({"max_tokens":5})").param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":""})").param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":"ten"})").param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","temperature":-1})").param, "temperature");
  EXPECT_EQ(expect_error(R"({"prompt":"a","n":2})").param, "n");
  EXPECT_EQ(expect_error(R"({"prompt":"a","top_p":0})").param, "top_p");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stop":[1]})").param, "stop");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stream":"yes"})").param, "stream");
  EXPECT_EQ(expect_error(R"({"prompt":["a","b"]})").param, "prompt");
  EXPECT_EQ(expect_error(R"({"messages":"hi"})", CompletionKind::chat).param, "messages");
  EXPECT_EQ(expect_error(R"({"prompt":"a"})", CompletionKind::chat).param, "messages");
  EXPECT_EQ(
      expect_error(R"({"messages":[{"role":"wizard","content":"x"}]})", CompletionKind::chat).param,
      "messages");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                         CompletionKind::chat)
                .param,
            "messages");
}

TEST(CompletionParams, ErrorsRenderInOpenAiFormat) {
  const std::string json = expect_error(R"({"prompt":"a","n":3})").to_json();
  EXPECT_NE(json.find("\"error\""), std::string::npos);
  EXPECT_NE(json.find("\"type\":\"invalid_request_error\""), std::string::npos);
  EXPECT_NE(json.find("\"param\":\"n\""), std::string::npos);
  EXPECT_NE(json.find("\"code\":null"), std::string::npos);
}

}  // namespace brisk
