#include "server/completion_choice.h"

namespace brisk {

using nlohmann::json;

CompletionChoice::CompletionChoice(int index, CompletionKind kind, const Engine& engine,
                                   bool logprobs, std::string echo,
                                   std::shared_ptr<ChatOutputParser> tool_parser)
    : index_(index),
      kind_(kind),
      logprobs_wanted_(logprobs),
      echo_(std::move(echo)),
      tool_parser_(std::move(tool_parser)),
      logprobs_(engine, kind) {}

void CompletionChoice::take(const GenerationUpdate& update, bool streamed) {
  if (logprobs_wanted_) logprobs_.append(update.logprobs);
  if (!streamed) text_ += update.text;
  if (update.finished()) {
    final_.finish_reason = update.finish_reason;
    final_.error = update.error;
    final_.request_fault = update.request_fault;
    final_.timings = update.timings;
    final_.completion_tokens = update.completion_tokens;
  }
}

bool CompletionChoice::reportable() const {
  return final_.finish_reason == FinishReason::stop || final_.finish_reason == FinishReason::length;
}

json CompletionChoice::stream_choice(const GenerationUpdate& update) {
  const bool final = update.finished();
  if (tool_parser_) {
    const auto changes = tool_parser_->append(update.text, final);
    if (changes.empty() && !final) return nullptr;
    return delta_choice(changes, final);
  }
  if (update.text.empty() && !final) return nullptr;
  return text_choice(update.text, final);
}

json CompletionChoice::text_choice(const std::string& text, bool final) {
  json choice = {{"index", index_}, {"logprobs", logprobs_json()}};
  choice["finish_reason"] = finish_reason_json(final);
  if (kind_ == CompletionKind::chat) {
    json delta = json::object();
    if (!first_chunk_sent_) delta["role"] = "assistant";
    if (!text.empty() || !final) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  first_chunk_sent_ = true;
  return choice;
}

json CompletionChoice::delta_choice(const std::vector<ChatDelta>& changes, bool final) {
  json delta = json::object();
  if (!first_chunk_sent_) delta["role"] = "assistant";
  std::string content;
  json calls = json::array();
  for (const ChatDelta& change : changes) {
    if (change.tool_call_index < 0) {
      content += change.content;
      continue;
    }
    json call = {{"index", change.tool_call_index}};
    if (!change.tool_call_name.empty()) {
      call["id"] = change.tool_call_id;
      call["type"] = "function";
      call["function"] = {{"name", change.tool_call_name}, {"arguments", ""}};
    } else {
      call["function"] = {{"arguments", change.arguments}};
    }
    // Pieces of the same call in one chunk: one entry (OpenAI sends one per call per chunk).
    if (!calls.empty() && calls.back()["index"] == change.tool_call_index &&
        change.tool_call_name.empty()) {
      calls.back()["function"]["arguments"] =
          calls.back()["function"]["arguments"].get<std::string>() + change.arguments;
    } else {
      calls.push_back(std::move(call));
    }
  }
  if (!content.empty()) delta["content"] = content;
  if (!calls.empty()) delta["tool_calls"] = std::move(calls);
  json choice = {{"index", index_}, {"delta", delta}, {"logprobs", logprobs_json()}};
  choice["finish_reason"] = finish_reason_json(final);
  first_chunk_sent_ = true;
  return choice;
}

json CompletionChoice::whole_choice() {
  if (tool_parser_) tool_parser_->append(text_, true);
  json choice = {{"index", index_},
                 {"finish_reason", finish_reason_json(true)},
                 {"logprobs", logprobs_json()}};
  if (tool_parser_) {
    const ParsedChatMessage& message = tool_parser_->message();
    json calls = json::array();
    for (const ToolCall& call : message.tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    choice["message"] = {
        {"role", "assistant"},
        {"content",
         message.content.empty() && !calls.empty() ? json(nullptr) : json(message.content)}};
    if (!calls.empty()) choice["message"]["tool_calls"] = std::move(calls);
  } else if (kind_ == CompletionKind::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = echo_ + text_;
  }
  return choice;
}

// "tool_calls" when the answer is calls (OpenAI's reason), else why generation ended; null
// before the choice's last chunk.
json CompletionChoice::finish_reason_json(bool final) const {
  if (!final) return nullptr;
  if (tool_parser_ && final_.finish_reason == FinishReason::stop &&
      !tool_parser_->message().tool_calls.empty()) {
    return "tool_calls";
  }
  return finish_reason_name(final_.finish_reason);
}

// The logprobs of the tokens since the last chunk (null when the request asked for none). A
// token whose text is held back by stop matching is reported with the next chunk that goes out.
json CompletionChoice::logprobs_json() {
  if (!logprobs_wanted_) return nullptr;
  return logprobs_.take();
}

}  // namespace brisk
