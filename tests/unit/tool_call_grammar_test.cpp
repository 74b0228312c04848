// The tool-call grammar of tool_choice auto on a real model and a real template (SmolLM2 with
// Qwen 2.5's Hermes-style template from the pinned llama.cpp): lazy, it allows anything until
// the model opens a call with the template's marker, and from there only a call whose arguments
// follow the function's schema. Skipped when the model or the llama.cpp source is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/model_store.h"
#include "engine/engine.h"
#include "engine/grammar.h"

namespace brisk {
namespace {

#ifndef BRISK_LLAMA_TEMPLATES_DIR
#define BRISK_LLAMA_TEMPLATES_DIR ""
#endif

constexpr const char* kWeather =
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},)"
    R"( "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"],)"
    R"( "additionalProperties": false})";

class ToolCallGrammar : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path templ =
        std::filesystem::path(BRISK_LLAMA_TEMPLATES_DIR) / "Qwen-Qwen2.5-7B-Instruct.jinja";
    const ResolveResult model = ModelStore::from_environment().resolve("smollm2-135m");
    if (!model.ok() || !std::filesystem::exists(templ)) {
      GTEST_SKIP() << "needs smollm2-135m and the llama.cpp source's templates";
    }
    EngineOptions options;
    options.model_path = model.path.string();
    options.ctx_size = 512;
    options.max_seqs = 1;
    options.threads = 1;
    options.chat_template_file = templ.string();
    std::string error;
    engine_ = Engine::load(options, &error);
    ASSERT_TRUE(engine_) << error;
  }

  // The constraint a chat request with the weather tool gets under `choice`.
  std::shared_ptr<TokenConstraint> constraint(ChatTools::Choice choice, bool parallel = true) {
    ChatTools tools;
    tools.tools.push_back({"get_weather", "Weather in a city", kWeather});
    tools.choice = choice;
    tools.parallel_calls = parallel;
    ChatPrompt chat;
    std::string error;
    EXPECT_TRUE(engine_->render_chat({{"user", "What is the weather in Paris?"}}, &tools, &chat,
                                     &error))
        << error;
    EXPECT_FALSE(chat.grammar.empty());
    const GrammarRequest request{GrammarRequest::Kind::gbnf, chat.grammar,
                                 chat.grammar_trigger_patterns, chat.grammar_trigger_tokens};
    auto compiled = engine_->compile_grammar(request, &error);
    EXPECT_TRUE(compiled) << error;
    return compiled;
  }

  // Accepts `text` token by token; each must be allowed first.
  void feed(TokenConstraint& constraint, const std::string& text) {
    for (const Token token : engine_->tokenize(text, false)) {
      ASSERT_TRUE(constraint.allows(token)) << "'" << engine_->token_piece(token) << "' in " << text;
      constraint.accept(token);
    }
  }

  bool allows_text(TokenConstraint& constraint, const std::string& text) {
    const TokenList tokens = engine_->tokenize(text, false);
    return !tokens.empty() && constraint.allows(tokens.front());
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(ToolCallGrammar, AutoIsFreeUntilTheCallMarkerThenFollowsTheSchema) {
  auto call = constraint(ChatTools::Choice::automatic);
  ASSERT_TRUE(call);
  // Before the marker: prose, JSON-looking junk, the end of generation — anything goes.
  EXPECT_TRUE(allows_text(*call, "Sunny"));
  EXPECT_TRUE(allows_text(*call, "}}"));
  EXPECT_TRUE(call->allows(engine_->tokenize("<|im_end|>", false).front()));
  feed(*call, "Let me check that for you. {\"oops\": 1}\n");
  EXPECT_TRUE(allows_text(*call, "Sunny"));
  // The marker starts the grammar: the call's JSON and the schema's keys only.
  feed(*call, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", ");
  EXPECT_FALSE(allows_text(*call, "Sunny"));
  EXPECT_FALSE(allows_text(*call, "}}"));
  EXPECT_FALSE(call->allows(engine_->tokenize("<|im_end|>", false).front()));
  EXPECT_TRUE(allows_text(*call, "\"unit\""));
  feed(*call, "\"unit\": \"");
  EXPECT_FALSE(allows_text(*call, "kelvin"));
  EXPECT_TRUE(allows_text(*call, "celsius"));
}

TEST_F(ToolCallGrammar, RequiredConstrainsFromTheFirstToken) {
  auto call = constraint(ChatTools::Choice::required);
  ASSERT_TRUE(call);
  // Fed the template's generation prompt first (as the route does), it allows no prose.
  EXPECT_FALSE(allows_text(*call, "Sunny"));
}

}  // namespace
}  // namespace brisk
