#include "server/completion_params.h"

#include <gtest/gtest.h>

#include "server/generation_config.h"

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
  ASSERT_EQ(params.prompts.size(), 1u);
  EXPECT_EQ(params.prompts[0].text, "hi");
  EXPECT_EQ(params.n, 1);
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
  ASSERT_EQ(params.prompts.size(), 1u) << "a list of token ids is one prompt";
  ASSERT_TRUE(params.prompts[0].tokens.has_value());
  EXPECT_EQ(*params.prompts[0].tokens, (TokenList{2, 100, 200}));
}

TEST(CompletionParams, AcceptsPromptListsAndChoiceCounts) {
  CompletionParams strings = expect_params(R"({"prompt":["a","b","c"],"n":2})");
  ASSERT_EQ(strings.prompts.size(), 3u);
  EXPECT_EQ(strings.prompts[2].text, "c");
  EXPECT_EQ(strings.n, 2);
  CompletionParams lists = expect_params(R"({"prompt":[[1,2],[3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(*lists.prompts[1].tokens, (TokenList{3}));
  EXPECT_EQ(expect_params(R"({"messages":[{"role":"user","content":"hi"}],"n":16})",
                          CompletionKind::chat)
                .n,
            16);
}

TEST(CompletionParams, BadPromptListsAndChoiceCountsNameTheirField) {
  for (const char* body : {R"({"prompt":[]})", R"({"prompt":["a",[1]]})", R"({"prompt":["a",1]})",
                           R"({"prompt":[[1],[]]})", R"({"prompt":["a",""]})",
                           R"({"prompt":[[1],[-1]]})", R"({"prompt":[[1],["a"]]})"}) {
    EXPECT_EQ(expect_error(body).param, "prompt") << body;
  }
  for (const char* body : {R"({"prompt":"a","n":0})", R"({"prompt":"a","n":17})",
                           R"({"prompt":"a","n":"2"})", R"({"prompt":"a","n":1.5})",
                           R"({"prompt":["a","b","c","d","e"],"n":16})"}) {
    EXPECT_EQ(expect_error(body).param, "n") << body;
  }
  EXPECT_EQ(expect_error(R"({"prompt":"a","n":17})").message, "'n' must be an integer from 1 to 16, got 17");
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
  EXPECT_EQ(expect_error(R"({"prompt":"a","top_p":0})").param, "top_p");
  // Found by completion_params_fuzzer: a top_p that rounds to 0.0f as a float was accepted.
  EXPECT_EQ(expect_error(R"({"prompt":"a","top_p":1e-60})").message,
            "'top_p' must be greater than 0");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stop":[1]})").param, "stop");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stream":"yes"})").param, "stream");
  EXPECT_EQ(expect_error(R"({"prompt":{"a":1}})").param, "prompt");
  EXPECT_EQ(expect_error(R"({"messages":"hi"})", CompletionKind::chat).param, "messages");
  EXPECT_EQ(expect_error(R"({"max_tokens":3})", CompletionKind::chat).param, "messages");
  // A completions body sent to chat: its field is named, not silently dropped.
  EXPECT_EQ(expect_error(R"({"prompt":"a"})", CompletionKind::chat).param, "prompt");
  EXPECT_EQ(
      expect_error(R"({"messages":[{"role":"wizard","content":"x"}]})", CompletionKind::chat).param,
      "messages");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                         CompletionKind::chat)
                .param,
            "messages");
}

TEST(CompletionParams, NumbersInErrorsAreShortAndTheTokenRangeIsNamed) {
  // std::to_string once wrote 1e308 out in 309 digits.
  EXPECT_EQ(expect_error(R"({"prompt":"a","temperature":1e308})").message,
            "'temperature' must be between 0 and 2, got 1e+308");
  EXPECT_EQ(expect_error(R"({"prompt":"a","temperature":2.5})").message,
            "'temperature' must be between 0 and 2, got 2.5");
  // A token id past int32 was "must be non-negative", which it was.
  EXPECT_EQ(expect_error(R"({"prompt":[1,1000000000000]})").message,
            "token ids in 'prompt' must be between 0 and 2147483647, got 1000000000000");
  EXPECT_EQ(expect_error(R"({"prompt":[-3]})").message,
            "token ids in 'prompt' must be between 0 and 2147483647, got -3");
}

TEST(CompletionParams, AWrongTypeInsideAContentPartIsA400NotAThrow) {
  // json::value("type", "") throws type_error.302 on a number: this once ended the process.
  for (const char* part : {R"({"type":1,"text":"x"})", R"({"type":null,"text":"x"})",
                           R"({"type":["text"],"text":"x"})", R"({"type":"text","text":5})",
                           R"("just a string")", R"({"text":"x"})"}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":[)") + part + "]}]}";
    EXPECT_EQ(expect_error(body, CompletionKind::chat).param, "messages") << body;
  }
}

TEST(CompletionParams, ReadsLogprobsInEachApisShape) {
  EXPECT_EQ(expect_params(R"({"prompt":"a"})").top_logprobs, -1);
  EXPECT_EQ(expect_params(R"({"prompt":"a","logprobs":0})").top_logprobs, 0);
  EXPECT_EQ(expect_params(R"({"prompt":"a","logprobs":5})").top_logprobs, 5);
  EXPECT_EQ(expect_params(R"({"prompt":"a","logprobs":null})").top_logprobs, -1);
  const char* chat = R"({"messages":[{"role":"user","content":"hi"}])";
  auto chat_body = [&](const char* fields) { return std::string(chat) + "," + fields + "}"; };
  EXPECT_EQ(expect_params(chat_body(R"("logprobs":false)"), CompletionKind::chat).top_logprobs, -1);
  EXPECT_EQ(expect_params(chat_body(R"("logprobs":true)"), CompletionKind::chat).top_logprobs, 0);
  EXPECT_EQ(expect_params(chat_body(R"("logprobs":true,"top_logprobs":3)"), CompletionKind::chat)
                .top_logprobs,
            3);

  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":21})").param, "logprobs");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":-1})").param, "logprobs");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":true})").param, "logprobs");
  EXPECT_EQ(expect_error(chat_body(R"("logprobs":1)"), CompletionKind::chat).param, "logprobs");
  EXPECT_EQ(expect_error(chat_body(R"("top_logprobs":2)"), CompletionKind::chat).param,
            "top_logprobs");
  EXPECT_EQ(
      expect_error(chat_body(R"("logprobs":true,"top_logprobs":99)"), CompletionKind::chat).param,
      "top_logprobs");
}

TEST(CompletionParams, FieldsLeftOutComeFromTheServerDefaults) {
  GenerationDefaults defaults;
  defaults.sampling.temperature = 0.8f;
  defaults.sampling.top_k = 40;
  defaults.sampling.min_p = 0.05f;
  auto parsed = parse_completion_params(R"({"prompt":"a","temperature":0.3})", CompletionKind::text,
                                        defaults);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(parsed));
  const SamplingParams& sampling = std::get<CompletionParams>(parsed).sampling;
  EXPECT_FLOAT_EQ(sampling.temperature, 0.3f);  // named by the request
  EXPECT_EQ(sampling.top_k, 40);                // from the server
  EXPECT_FLOAT_EQ(sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(sampling.top_p, 1.0f);
  // Without defaults a request that names nothing gets OpenAI's: the full distribution.
  const SamplingParams plain = expect_params(R"({"prompt":"a"})").sampling;
  EXPECT_FLOAT_EQ(plain.temperature, 1.0f);
  EXPECT_EQ(plain.top_k, 0);
  EXPECT_FLOAT_EQ(plain.top_p, 1.0f);
  EXPECT_FLOAT_EQ(plain.min_p, 0.0f);
}

TEST(GenerationConfig, PresetsAndOverrides) {
  auto openai = make_generation_defaults("openai", "");
  ASSERT_TRUE(std::holds_alternative<GenerationDefaults>(openai));
  EXPECT_FLOAT_EQ(std::get<GenerationDefaults>(openai).sampling.temperature, 1.0f);
  EXPECT_EQ(std::get<GenerationDefaults>(openai).sampling.top_k, 0);

  auto llama = make_generation_defaults("llama-server", R"({"top_k":20,"max_tokens":256})");
  ASSERT_TRUE(std::holds_alternative<GenerationDefaults>(llama));
  const GenerationDefaults& defaults = std::get<GenerationDefaults>(llama);
  EXPECT_FLOAT_EQ(defaults.sampling.temperature, 0.8f);
  EXPECT_EQ(defaults.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(defaults.sampling.top_p, 0.95f);
  EXPECT_FLOAT_EQ(defaults.sampling.min_p, 0.05f);
  EXPECT_EQ(defaults.max_tokens, 256);

  for (const char* bad : {"not json", "[1]", R"({"temprature":1})", R"({"temperature":9})",
                          R"({"top_k":"x"})", R"({"max_tokens":0})", R"({"max_tokens":1.5})"}) {
    auto result = make_generation_defaults("openai", bad);
    EXPECT_TRUE(std::holds_alternative<std::string>(result)) << bad;
  }
  EXPECT_TRUE(std::holds_alternative<std::string>(make_generation_defaults("vllm", "")));
}

TEST(CompletionParams, ErrorsRenderInOpenAiFormat) {
  const std::string json = expect_error(R"({"prompt":"a","n":0})").to_json();
  EXPECT_NE(json.find("\"error\""), std::string::npos);
  EXPECT_NE(json.find("\"type\":\"invalid_request_error\""), std::string::npos);
  EXPECT_NE(json.find("\"param\":\"n\""), std::string::npos);
  EXPECT_NE(json.find("\"code\":null"), std::string::npos);
}

TEST(CompletionParams, ResponseFormatBecomesAGrammarRequest) {
  EXPECT_FALSE(expect_params(R"({"prompt":"a","response_format":{"type":"text"}})").grammar);
  CompletionParams object =
      expect_params(R"({"prompt":"a","response_format":{"type":"json_object"}})");
  ASSERT_TRUE(object.grammar);
  EXPECT_EQ(object.grammar->kind, GrammarRequest::Kind::json_schema);
  EXPECT_EQ(object.grammar->text, R"({"type":"object"})");
  EXPECT_EQ(object.grammar_field, "response_format");
  CompletionParams schema = expect_params(
      R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"p",
          "strict":true,"schema":{"type":"object","properties":{"name":{"type":"string"},
          "age":{"type":"integer"}}}}}})");
  ASSERT_TRUE(schema.grammar);
  // The client's order of properties is the output's: not sorted.
  EXPECT_EQ(schema.grammar->text,
            R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}}})");
  CompletionParams gbnf = expect_params(R"({"prompt":"a","grammar":"root ::= \"yes\""})");
  ASSERT_TRUE(gbnf.grammar);
  EXPECT_EQ(gbnf.grammar->kind, GrammarRequest::Kind::gbnf);
  EXPECT_EQ(gbnf.grammar_field, "grammar");
}

TEST(CompletionParams, LogitBiasIsReadAndChecked) {
  CompletionParams params =
      expect_params(R"({"prompt":"a","logit_bias":{"17":-100,"4":2.5}})");
  ASSERT_EQ(params.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(params.sampling.logit_bias[0], (std::pair<Token, float>{17, -100.0f}));
  EXPECT_EQ(params.sampling.logit_bias[1], (std::pair<Token, float>{4, 2.5f}));
  for (const char* body : {R"({"prompt":"a","logit_bias":{"x":1}})",
                           R"({"prompt":"a","logit_bias":{"-3":1}})",
                           R"({"prompt":"a","logit_bias":{"3":"1"}})",
                           R"({"prompt":"a","logit_bias":{"3":100.5}})",
                           R"({"prompt":"a","logit_bias":[1]})"}) {
    EXPECT_EQ(expect_error(body).param, "logit_bias") << body;
  }
}

TEST(CompletionParams, ABadOutputFormatNamesItsField) {
  for (const char* body : {
           R"({"prompt":"a","response_format":"json"})",
           R"({"prompt":"a","response_format":{"type":"xml"}})",
           R"({"prompt":"a","response_format":{"type":"json_schema"}})",
           R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"schema":{}}}})",
           R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x",
               "schema":[1]}}})",
           R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x",
               "strict":"yes"}}})",
           R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x",
               "schemma":{}}}})",
           R"({"prompt":"a","response_format":{"type":"json_object","schema":{}}})",
       }) {
    EXPECT_EQ(expect_error(body).param, "response_format") << body;
  }
  EXPECT_EQ(expect_error(R"({"prompt":"a","grammar":""})").param, "grammar");
  EXPECT_EQ(expect_error(R"({"prompt":"a","grammar":"root ::= x",
      "response_format":{"type":"json_object"}})").param, "grammar");
  EXPECT_EQ(expect_error(R"({"prompt":"a","ignore_eos":true,
      "response_format":{"type":"json_object"}})").param, "ignore_eos");
}

}  // namespace brisk

namespace brisk {

TEST(CompletionParams, EchoIsReadForCompletionsAndRefusedWithLogprobs) {
  EXPECT_TRUE(expect_params(R"({"prompt":"a","echo":true})").echo);
  EXPECT_FALSE(expect_params(R"({"prompt":"a","echo":false})").echo);
  EXPECT_EQ(expect_error(R"({"prompt":"a","echo":"yes"})").param, "echo");
  const ApiError both = expect_error(R"({"prompt":"a","echo":true,"logprobs":2})");
  EXPECT_EQ(both.param, "echo");
  EXPECT_NE(both.message.find("log-probabilities"), std::string::npos) << both.message;
}

TEST(CompletionParams, ReadsToolsAndToolMessages) {
  const CompletionParams params = expect_params(
      R"({"messages":[{"role":"user","content":"w?"},
          {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
           "function":{"name":"f","arguments":"{}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"18"}],
          "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})",
      CompletionKind::chat);
  ASSERT_EQ(params.messages.size(), 3u);
  EXPECT_EQ(params.messages[1].tool_calls.at(0).id, "c1");
  EXPECT_EQ(params.messages[2].role, "tool");
  EXPECT_EQ(params.messages[2].tool_call_id, "c1");
  ASSERT_TRUE(params.tools);
  EXPECT_EQ(params.tools->tools.choice, ChatTools::Choice::required);
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"tool","content":"18"}]})", CompletionKind::chat)
                .param,
            "messages");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":"x"}],
                             "tools":[{"type":"function","function":{"name":"f"}}],
                             "response_format":{"type":"json_object"}})",
                         CompletionKind::chat)
                .param,
            "response_format");
}

}  // namespace brisk
