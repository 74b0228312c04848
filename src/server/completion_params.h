#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/token.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/tool_params.h"

namespace brisk {

// What a request that names no sampling parameter (or no max_tokens) gets: the server's
// --generation-config preset with --override-generation-config applied (docs/cli.md).
struct GenerationDefaults {
  SamplingParams sampling;        // OpenAI's unless configured: temperature 1, no truncation
  std::optional<int> max_tokens;  // empty: whatever the context leaves after the prompt
};

// The most alternatives `top_logprobs` / completions' `logprobs` may ask for (OpenAI's limit).
inline constexpr int kMaxTopLogprobs = 20;
// The most tokens one `logit_bias` may name (OpenAI's limit).
inline constexpr size_t kMaxLogitBias = 300;

// The most choices one request may ask for per prompt (`n`), and the most prompts times `n`
// one /v1/completions request may ask for: each choice runs as a sequence of its own.
inline constexpr int kMaxChoices = 16;
inline constexpr int kMaxPromptChoices = 64;

// One prompt of /v1/completions: a string, or token ids.
struct TextPrompt {
  std::string text;
  std::optional<TokenList> tokens;
};

// A validated /v1/chat/completions or /v1/completions body.
struct CompletionParams {
  CompletionKind kind = CompletionKind::text;
  std::optional<std::string> model;
  std::vector<ChatMessage> messages;       // chat
  std::optional<ToolRequest> tools;        // chat: tools the model may call
  std::vector<TextPrompt> prompts;         // text: one or more prompts
  int n = 1;                               // choices per prompt
  std::optional<int> max_tokens;
  SamplingParams sampling;
  int top_logprobs = -1;  // < 0: no logprobs; 0: the chosen token's; N: and the N most likely
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  bool echo = false;  // completions: the prompt comes first in the answer's text
  std::optional<int> priority;  // lower runs sooner under --policy priority (vLLM's field)
  double deadline_ms = 0;       // first token due this many ms after arrival, else dropped
  // The client's end-user or conversation id (`user`, or an X-Session-Id header): --trace-out
  // records it, so a replay can tell conversations apart. Empty: none.
  std::string session;
  // response_format json_object / json_schema, or llama.cpp's `grammar`; the field it came from
  // names the error when it does not compile.
  std::optional<GrammarRequest> grammar;
  std::string grammar_field;
};

// The most a `priority` may be, either way (an X-Request-Priority header is read the same).
inline constexpr int kMaxPriority = 1000000;
// The longest `user` (or X-Session-Id) accepted.
inline constexpr size_t kMaxSessionIdBytes = 256;

// Parses and validates a request body: every field a client can get wrong gets a 400 that
// names the field and says what is accepted.
// Sampling fields the request leaves out come from `defaults` (max_tokens is settled later,
// against the prompt's length).
std::variant<CompletionParams, ApiError> parse_completion_params(
    std::string_view body, CompletionKind kind, const GenerationDefaults& defaults = {});

// Reads temperature, top_p, top_k, min_p and seed from `object` onto `sampling` (absent fields
// keep their values), with the same checks a request gets.
std::optional<ApiError> read_sampling_params(const nlohmann::json& object,
                                             SamplingParams& sampling);

}  // namespace brisk
