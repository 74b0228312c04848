#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>

#include "server/api_error.h"

namespace brisk {

enum class CompletionKind { chat, text };

// What brisk serve does with a request field (docs/api.md has the same table; a test keeps the
// two equal).
enum class FieldUse {
  honoured,  // read and acted on
  ignored,   // accepted and deliberately not acted on (bookkeeping fields of OpenAI's API)
  refused,   // a 400 naming the field, unless the value asks for nothing (n: 1, echo: false)
};

struct RequestField {
  const char* name;
  bool chat;         // accepted on /v1/chat/completions
  bool completions;  // accepted on /v1/completions
  FieldUse use;
  const char* note;  // what it does, or why it is ignored or refused
};

// Every request field brisk serve knows, for both completion endpoints.
std::span<const RequestField> request_fields();

// A 400 for the first field of `body` that is unknown, belongs to the other endpoint, or is
// refused with a value that asks for something; nullopt when every field is honoured or
// ignored on purpose. No field is silently dropped.
std::optional<ApiError> check_request_fields(const nlohmann::json& body, CompletionKind kind);

}  // namespace brisk
