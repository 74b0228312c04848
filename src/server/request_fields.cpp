#include "server/request_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

namespace brisk {
namespace {

using nlohmann::json;
constexpr FieldUse H = FieldUse::honoured;
constexpr FieldUse I = FieldUse::ignored;
constexpr FieldUse R = FieldUse::refused;

// name, chat, completions, use, note. Keep docs/api.md's table in the same order.
constexpr RequestField kFields[] = {
    {"model", true, true, H, "one of the served models (GET /v1/models); absent: the first generative one"},
    {"messages", true, false, H,
     "roles system, developer, user, assistant (with tool_calls), tool (with tool_call_id); text "
     "content"},
    {"prompt", false, true, H,
     "a string, a list of strings, a list of token ids, or a list of token-id lists: choices "
     "for each prompt in turn"},
    {"max_tokens", true, true, H, "at most this many tokens; absent: what the context leaves"},
    {"max_completion_tokens", true, true, H, "the same as max_tokens (OpenAI's newer name)"},
    {"temperature", true, true, H, "0-2; 0 is greedy"},
    {"top_p", true, true, H, "(0, 1]"},
    {"top_k", true, true, H, "0 or -1 is off (llama.cpp's and vLLM's extension)"},
    {"min_p", true, true, H, "[0, 1] (llama.cpp's and vLLM's extension)"},
    {"typical_p", true, true, H,
     "(0, 1], 1 is off: locally typical sampling, after top_k (llama.cpp's and vLLM's "
     "extension)"},
    {"presence_penalty", true, true, H,
     "[-2, 2]: subtracted once from the logit of each token the answer already holds "
     "(OpenAI's and vLLM's: the answer's tokens, not the prompt's)"},
    {"frequency_penalty", true, true, H,
     "[-2, 2]: subtracted from a token's logit for each time the answer holds it"},
    {"repetition_penalty", true, true, H,
     "(0, 10], 1 is off: the logit of a token of the prompt or the answer is divided by it "
     "(multiplied when negative); vLLM's name, over the whole prompt and answer"},
    {"repeat_penalty", true, true, H,
     "llama-server's name for the same penalty, over the last repeat_last_n tokens (64)"},
    {"repeat_last_n", true, true, H,
     "tokens of the prompt and answer the repetition penalty looks back over: -1 all, 0 off"},
    {"seed", true, true, H, "reproducible draws for the same request"},
    {"stop", true, true, H, "a string or up to 16 strings"},
    {"stream", true, true, H, "server-sent events"},
    {"stream_options", true, true, H, "include_usage"},
    {"logprobs", true, true, H, "chat: true/false; completions: 0-20 alternatives"},
    {"top_logprobs", true, false, H, "0-20, with logprobs: true"},
    {"n_probs", false, true, H, "llama-server's name for completions' logprobs (the same count)"},
    {"response_format", true, true, H,
     "text, json_object, json_schema (llama.cpp's grammar engine constrains the output)"},
    {"grammar", true, true, H, "GBNF rules, llama.cpp's grammar syntax (llama-server's field)"},
    {"logit_bias", true, true, H, "token id -> bias from -100 to 100; -100 bans the token"},
    {"ignore_eos", true, true, H, "keep generating past end-of-generation (vLLM's extension)"},
    {"priority", true, true, H, "lower runs sooner under --policy priority (vLLM's extension)"},
    {"deadline_ms", true, true, H, "the first token is due this many ms after arrival, else 408"},
    {"n", true, true, H,
     "1-16 choices per prompt (at most 64 per request); one prefill, the choices share its KV "
     "cells"},
    {"best_of", false, true, R, "only 1: server-side ranking of choices is not built (send n)"},
    {"echo", false, true, H, "true: the prompt comes first in the text (not with logprobs)"},
    {"suffix", false, true, R, "no fill-in-the-middle: only empty"},
    {"tools", true, false, H,
     "functions the model may call, rendered by the model's Jinja template; its output is parsed "
     "into tool_calls"},
    {"tool_choice", true, false, H,
     "auto (a call the model opens with the template's marker follows a grammar from there), "
     "none, required or a named function (enforced by a grammar from the first token)"},
    {"parallel_tool_calls", true, false, H, "false: at most one call per answer"},
    {"functions", true, false, R, "no function calling: only an empty list"},
    {"function_call", true, false, R, "only none or auto (there are no functions)"},
    {"modalities", true, false, R, "only [\"text\"]"},
    {"audio", true, false, R, "no audio output"},
    {"prediction", true, false, R, "no predicted outputs"},
    {"reasoning_effort", true, false, R, "not a reasoning model server"},
    {"web_search_options", true, false, R, "no web search"},
    {"user", true, true, H,
     "an end-user or conversation id; --trace-out records it as the request's session"},
    {"store", true, false, I, "brisk stores no completions (false and true alike)"},
    {"metadata", true, false, I, "tags for stored completions; nothing is stored"},
    {"service_tier", true, false, I, "one tier; priority orders requests"},
};

// The value a refused field may still carry: the one that asks for nothing.
bool asks_for_nothing(std::string_view name, const json& value) {
  if (value.is_null()) return true;
  if (name == "n" || name == "best_of") return value.is_number_integer() && value == 1;
  if (name == "suffix") return value.is_string() && value.get<std::string>().empty();
  if (name == "functions") return value.is_array() && value.empty();
  if (name == "function_call") {
    return value.is_string() && (value == "none" || value == "auto");
  }
  if (name == "modalities") return value == json::array({"text"});
  return false;
}

}  // namespace

std::span<const RequestField> request_fields() { return kFields; }

std::optional<ApiError> check_request_fields(const json& body, CompletionKind kind) {
  const bool chat = kind == CompletionKind::chat;
  const char* endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  for (const auto& item : body.items()) {
    const std::string& name = item.key();
    const json& value = item.value();
    const auto* field = std::find_if(std::begin(kFields), std::end(kFields),
                                     [&](const RequestField& f) { return name == f.name; });
    if (field == std::end(kFields)) {
      return ApiError::invalid(
          fmt::format("unrecognized request field '{}': brisk serve refuses what it would not "
                      "act on (docs/api.md lists every field)",
                      name),
          name);
    }
    if (!(chat ? field->chat : field->completions)) {
      return ApiError::invalid(
          fmt::format("'{}' is not a field of {} (docs/api.md)", name, endpoint), name);
    }
    if (field->use == FieldUse::refused && !asks_for_nothing(name, value)) {
      return ApiError::invalid(
          fmt::format("'{}' is not supported by brisk serve: {}", name, field->note), name);
    }
  }
  return std::nullopt;
}

}  // namespace brisk
