// Fuzzes what brisk serve makes of a /v1/chat/completions or /v1/completions body
// (parse_completion_params; chat with the llama-server --generation-config preset as defaults,
// text with OpenAI's) and of an --override-generation-config value (make_generation_defaults,
// which reads it with read_sampling_params, also called alone).
// Beyond "no crash": an accepted body must hold only values the engine accepts, and a refusal
// must be a 400 whose OpenAI error body is valid JSON.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>

#include "server/completion_params.h"
#include "server/generation_config.h"

namespace {

using brisk::ApiError;
using brisk::CompletionKind;
using brisk::CompletionParams;
using brisk::GenerationDefaults;

void require(bool condition) {
  if (!condition) std::abort();
}

void check_sampling(const brisk::SamplingParams& sampling) {
  require(sampling.temperature >= 0.0f && sampling.temperature <= 2.0f);
  require(sampling.top_p > 0.0f && sampling.top_p <= 1.0f);
  require(sampling.top_k >= 0);
  require(sampling.min_p >= 0.0f && sampling.min_p <= 1.0f);
  require(sampling.logit_bias.size() <= brisk::kMaxLogitBias);
  for (const auto& [token, bias] : sampling.logit_bias) {
    require(token >= 0 && bias >= -100.0f && bias <= 100.0f);
  }
}

void check_accepted(const CompletionParams& params, CompletionKind kind) {
  require(params.kind == kind);
  if (kind == CompletionKind::chat) {
    require(!params.messages.empty());
    for (const brisk::ChatMessage& message : params.messages) {
      require(message.role == "system" || message.role == "user" || message.role == "assistant" ||
              message.role == "tool");
      require(message.tool_calls.empty() || message.role == "assistant");
    }
    if (params.tools) {
      const brisk::ChatTools& tools = params.tools->tools;
      require(!tools.tools.empty() && tools.tools.size() <= brisk::kMaxTools);
      for (const brisk::ToolDefinition& tool : tools.tools) {
        require(!tool.name.empty() && tool.name.size() <= 64);
        require(tool.parameters.empty() || nlohmann::json::parse(tool.parameters).is_object());
      }
      for (size_t index : params.tools->strict_tools) require(index < brisk::kMaxTools);
      // A format grammar beside tools the model may call is refused.
      require(!params.grammar || tools.choice == brisk::ChatTools::Choice::none);
    }
  } else {
    require(!params.prompts.empty());
    require(params.prompts.size() * static_cast<size_t>(params.n) <= brisk::kMaxPromptChoices);
    for (const brisk::TextPrompt& prompt : params.prompts) {
      require(!prompt.text.empty() || (prompt.tokens && !prompt.tokens->empty()));
      if (prompt.tokens) {
        for (brisk::Token token : *prompt.tokens) require(token >= 0);
      }
    }
  }
  require(params.n >= 1 && params.n <= brisk::kMaxChoices);
  require(!params.max_tokens || *params.max_tokens >= 1);
  require(params.top_logprobs >= -1 && params.top_logprobs <= brisk::kMaxTopLogprobs);
  require(params.stop.size() <= 16);
  check_sampling(params.sampling);
}

void check_refused(const ApiError& error) {
  require(error.status == 400);
  require(!error.message.empty());
  const nlohmann::json body = nlohmann::json::parse(error.to_json(), nullptr, false);
  require(body.is_object() && body.contains("error"));
}

void parse_as(std::string_view body, CompletionKind kind, const GenerationDefaults& defaults) {
  auto parsed = brisk::parse_completion_params(body, kind, defaults);
  if (const auto* params = std::get_if<CompletionParams>(&parsed)) {
    check_accepted(*params, kind);
  } else {
    check_refused(std::get<ApiError>(parsed));
  }
}

const GenerationDefaults& preset(const char* name) {
  static const GenerationDefaults openai =
      std::get<GenerationDefaults>(brisk::make_generation_defaults("openai", ""));
  static const GenerationDefaults llama_server =
      std::get<GenerationDefaults>(brisk::make_generation_defaults("llama-server", ""));
  return std::string_view(name) == "openai" ? openai : llama_server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  parse_as(body, CompletionKind::chat, preset("llama-server"));
  parse_as(body, CompletionKind::text, preset("openai"));

  auto configured = brisk::make_generation_defaults("llama-server", body);
  if (const auto* defaults = std::get_if<GenerationDefaults>(&configured)) {
    check_sampling(defaults->sampling);
    require(!defaults->max_tokens || *defaults->max_tokens >= 1);
    require(!brisk::describe_generation_defaults(*defaults).empty());
  } else {
    require(!std::get<std::string>(configured).empty());
  }

  // read_sampling_params on its own, over values a request did not validate first.
  const nlohmann::json object = nlohmann::json::parse(body, nullptr, false);
  if (object.is_object()) {
    brisk::SamplingParams sampling;
    if (!brisk::read_sampling_params(object, sampling)) check_sampling(sampling);
  }
  return 0;
}
