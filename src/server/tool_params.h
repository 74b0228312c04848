#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <variant>
#include <vector>

#include "engine/chat_template.h"
#include "server/api_error.h"

namespace brisk {

// The most tools one request may carry (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

// A chat request's tools, as the client sent them: `tools`, `tool_choice` and
// `parallel_tool_calls` read and checked (every malformed field a 400 that names it). A
// `tool_choice` that names a function leaves only that tool, with the choice `required`.
struct ToolRequest {
  ChatTools tools;
  // The tools whose function asked for `strict` arguments (their indices in the request).
  std::vector<size_t> strict_tools;
};

// Empty when the request has no tools (or an empty list) and a tool_choice that asks for none.
std::variant<std::optional<ToolRequest>, ApiError> read_tool_request(const nlohmann::json& body);

// An assistant message's `tool_calls` onto `message`.
std::optional<ApiError> read_tool_calls(const nlohmann::json& calls, ChatMessage& message);

}  // namespace brisk
