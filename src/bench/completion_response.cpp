#include "bench/completion_response.h"

#include <fmt/format.h>

#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace brisk::bench {

using json = nlohmann::json;

namespace {

// The text a completion chunk or response carries: `text` for completions, the message or delta
// content for chat; with `with_reasoning`, a chat choice's reasoning text when it has no content
// (generated tokens the user waits for, though a chat client does not resend them).
std::string_view choice_text(const json& choice, ApiKind kind, bool with_reasoning) {
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
    if (text.empty() && with_reasoning) text = string_at(*it, "reasoning_content");
    return text;
  }
  return {};
}

// A token count of `usage`, when it is one: a count that is a string, a fraction or out of range
// is not reported at all (json::value would throw on the string, and converting 1e300 to int is
// undefined).
std::optional<int> token_count(const json& usage, const char* key) {
  const auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const uint64_t count = it->get<uint64_t>();
    if (count > uint64_t(std::numeric_limits<int>::max())) return std::nullopt;
    return static_cast<int>(count);
  }
  const int64_t count = it->get<int64_t>();
  if (count < 0 || count > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(count);
}

// A duration in milliseconds at `key`, when it is a finite, non-negative number.
std::optional<double> milliseconds_at(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double value = it->get<double>();
  if (!(value >= 0) || value > 1e12) return std::nullopt;
  return value;
}

// The server's own view of the request: brisk's `brisk_timings` or llama-server's `timings`.
void read_server_timings(const json& object, RequestRecord& record) {
  if (const auto brisk = object.find("brisk_timings");
      brisk != object.end() && brisk->is_object()) {
    if (const auto ttft = milliseconds_at(*brisk, "ttft_ms")) record.server_ttft_ms = *ttft;
    if (const auto queue = milliseconds_at(*brisk, "queue_ms")) record.server_queue_ms = *queue;
  } else if (const auto llama = object.find("timings");
             llama != object.end() && llama->is_object()) {
    if (const auto prompt = milliseconds_at(*llama, "prompt_ms")) record.server_ttft_ms = *prompt;
    if (const auto cached = token_count(*llama, "cache_n")) record.cached_prompt_tokens = *cached;
  }
}

// Reads `usage` and reports whether the object carried any non-empty text.
bool read_completion_object(const json& object, ApiKind kind, RequestRecord& record) {
  if (const auto usage = object.find("usage"); usage != object.end() && usage->is_object()) {
    if (const auto count = token_count(*usage, "prompt_tokens")) record.prompt_tokens = *count;
    if (const auto count = token_count(*usage, "completion_tokens")) {
      record.completion_tokens = *count;
    }
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) {
      if (const auto cached = token_count(*details, "cached_tokens")) {
        record.cached_prompt_tokens = *cached;
      }
    }
  }
  read_server_timings(object, record);
  const auto choices = object.find("choices");
  if (choices == object.end() || !choices->is_array() || choices->empty()) return false;
  if (record.keep_answer) record.answer += choice_text((*choices)[0], kind, false);
  return !choice_text((*choices)[0], kind, true).empty();
}

// An embeddings answer: one vector per input sent (of any encoding), its prompt tokens, no
// output. A rerank answer alike: one result per document sent, in "results".
void read_embeddings_object(const json& object, ApiKind kind, RequestRecord& record) {
  const char* list = kind == ApiKind::rerank ? "results" : "data";
  const auto data = object.find(list);
  if (data == object.end() || !data->is_array()) {
    record.fail(RequestError::malformed_sse,
                fmt::format("{} answer without a \"{}\" list",
                            kind == ApiKind::rerank ? "a rerank" : "an embeddings", list));
    return;
  }
  record.embeddings = static_cast<int>(data->size());
  if (record.embeddings != record.embedding_inputs) {
    record.fail(RequestError::malformed_sse,
                fmt::format("{} {} came back for {} {}", record.embeddings,
                            kind == ApiKind::rerank ? "scores" : "vectors",
                            record.embedding_inputs,
                            kind == ApiKind::rerank ? "documents" : "inputs"));
    return;
  }
  if (const auto usage = object.find("usage"); usage != object.end() && usage->is_object()) {
    if (const auto count = token_count(*usage, "prompt_tokens")) record.prompt_tokens = *count;
  }
  record.completion_tokens = 0;  // nothing is generated
  read_server_timings(object, record);
}

// The error's message, or else the start of what the server sent. (Not error.dump(): dumping
// recurses, and a server can nest arrays deeper than the stack.)
std::string error_message_of(const json& object, std::string_view sent) {
  const json& error = object["error"];
  if (error.is_string()) return error.get<std::string>();
  const auto message = error.is_object() ? error.find("message") : error.end();
  if (error.is_object() && message != error.end() && message->is_string()) {
    return message->get<std::string>();
  }
  return "an error without a message: " + std::string(sent.substr(0, 200));
}

}  // namespace

void read_stream_event(std::string_view data, ApiKind kind, TimePoint arrived,
                       RequestRecord& record) {
  const json object = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    record.fail(RequestError::malformed_sse, "not JSON: " + std::string(data.substr(0, 200)));
  } else if (object.contains("error")) {
    record.fail(RequestError::stream_error, error_message_of(object, data));
  } else if (read_completion_object(object, kind, record)) {
    record.content_chunks.push_back(arrived);
  }
}

void read_response_body(std::string_view body, ApiKind kind, RequestRecord& record) {
  const json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) {
    record.fail(RequestError::malformed_sse, "response is not JSON");
  } else if (object.contains("error")) {
    record.fail(RequestError::stream_error, error_message_of(object, body));
  } else if (pooling_route(kind)) {
    read_embeddings_object(object, kind, record);
  } else {
    read_completion_object(object, kind, record);
  }
}

}  // namespace brisk::bench
