#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/token.h"
#include "server/api_error.h"

namespace brisk {

enum class CompletionKind { chat, text };

// A validated /v1/chat/completions or /v1/completions body.
struct CompletionParams {
  CompletionKind kind = CompletionKind::text;
  std::optional<std::string> model;
  std::vector<ChatMessage> messages;       // chat
  std::string prompt;                      // text, as a string
  std::optional<TokenList> prompt_tokens;  // text, given as token ids
  std::optional<int> max_tokens;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
};

// Parses and validates a request body: every field a client can get wrong gets a 400 that
// names the field and says what is accepted.
std::variant<CompletionParams, ApiError> parse_completion_params(std::string_view body,
                                                                 CompletionKind kind);

}  // namespace brisk
