#include "bench/completion_response.h"

#include <string>

#include <nlohmann/json.hpp>

namespace brisk::bench {

using json = nlohmann::json;

namespace {

// The text a completion chunk or response carries: `text` for completions, the message or delta
// content for chat. Reasoning text counts too: those are generated tokens the user waits for.
std::string_view choice_text(const json& choice, ApiKind kind) {
  auto string_at = [](const json& object, const char* key) -> std::string_view {
    const auto it = object.find(key);
    return it != object.end() && it->is_string()
               ? std::string_view(it->get_ref<const std::string&>())
               : std::string_view();
  };
  if (kind == ApiKind::completions) return string_at(choice, "text");
  for (const char* holder : {"delta", "message"}) {
    const auto it = choice.find(holder);
    if (it == choice.end() || !it->is_object()) continue;
    std::string_view text = string_at(*it, "content");
    if (text.empty()) text = string_at(*it, "reasoning_content");
    return text;
  }
  return {};
}

// Reads `usage` and reports whether the object carried any non-empty text.
bool read_completion_object(const json& object, ApiKind kind, RequestRecord& record) {
  if (const auto usage = object.find("usage"); usage != object.end() && usage->is_object()) {
    record.prompt_tokens = usage->value("prompt_tokens", record.prompt_tokens);
    record.completion_tokens = usage->value("completion_tokens", record.completion_tokens);
  }
  const auto choices = object.find("choices");
  if (choices == object.end() || !choices->is_array() || choices->empty()) return false;
  return !choice_text((*choices)[0], kind).empty();
}

std::string error_message_of(const json& object) {
  const json& error = object["error"];
  if (error.is_object() && error.contains("message") && error["message"].is_string())
    return error["message"].get<std::string>();
  return error.dump();
}

}  // namespace

void read_stream_event(std::string_view data, ApiKind kind, TimePoint arrived,
                       RequestRecord& record) {
  const json object = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    record.fail(RequestError::malformed_sse, "not JSON: " + std::string(data.substr(0, 200)));
  } else if (object.contains("error")) {
    record.fail(RequestError::stream_error, error_message_of(object));
  } else if (read_completion_object(object, kind, record)) {
    record.content_chunks.push_back(arrived);
  }
}

void read_response_body(std::string_view body, ApiKind kind, RequestRecord& record) {
  const json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    record.fail(RequestError::malformed_sse, "response is not JSON");
  } else if (object.contains("error")) {
    record.fail(RequestError::stream_error, error_message_of(object));
  } else {
    read_completion_object(object, kind, record);
  }
}

}  // namespace brisk::bench
