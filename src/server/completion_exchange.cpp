#include "server/completion_exchange.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

#include "common/log.h"
#include "server/openai_json.h"

namespace brisk {
namespace {

using nlohmann::json;

std::string next_completion_id(CompletionKind kind) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t number = ++counter;
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return fmt::format("{}-{:x}{:06x}", kind == CompletionKind::chat ? "chatcmpl" : "cmpl",
                     static_cast<uint64_t>(now) & 0xffffffffffULL, number & 0xffffff);
}

bool is_reportable(FinishReason reason) {
  return reason == FinishReason::stop || reason == FinishReason::length;
}

}  // namespace

CompletionExchange::CompletionExchange(std::shared_ptr<HttpSession> session,
                                       CompletionParams params, std::string model_name,
                                       EngineLoop& engine_loop, const Engine& engine,
                                       std::shared_ptr<ChatOutputParser> tool_parser)
    : session_(std::move(session)),
      params_(std::move(params)),
      model_name_(std::move(model_name)),
      engine_loop_(engine_loop),
      tool_parser_(std::move(tool_parser)),
      id_(next_completion_id(params_.kind)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      logprobs_(engine, params_.kind) {
  if (params_.echo) {
    if (params_.prompt_tokens) {
      for (Token token : *params_.prompt_tokens) echo_ += engine.token_piece(token);
    } else {
      echo_ = params_.prompt;
    }
  }
}

void CompletionExchange::attach(const std::shared_ptr<Request>& request) {
  request_ = request;
  auto executor = session_->executor();
  request->on_update = [self = shared_from_this(), executor](GenerationUpdate&& update) {
    net::post(executor, [self, update = std::move(update)] { self->on_update(update); });
  };
}

void CompletionExchange::begin() {
  if (params_.stream) {
    session_->begin_event_stream(200, "text/event-stream");
    if (!echo_.empty()) session_->send_event("data: " + chunk_json(echo_, nullptr) + "\n\n");
  }
  std::weak_ptr<Request> weak_request = request_;
  EngineLoop* engine_loop = &engine_loop_;
  session_->watch_for_disconnect([weak_request, engine_loop] {
    if (auto request = weak_request.lock()) {
      request->cancelled = true;
      engine_loop->wake();
    }
  });
}

// Runs on the session's strand: a failure here ends this response, never the I/O thread.
void CompletionExchange::on_update(const GenerationUpdate& update) {
  if (!request_) return;  // the response already failed
  try {
    present_update(update);
  } catch (const std::exception& e) {
    spdlog::error("request {}: writing its response failed: {}", id_, e.what());
    request_->cancelled = true;
    engine_loop_.wake();
    session_->abort();
    request_.reset();
    return;
  }
  if (update.finished()) {
    log_finished(update);
    if (trace_) write_trace(update);
    request_.reset();
  }
}

void CompletionExchange::record_to(TraceWriter& trace, std::string prompt_text) {
  trace_ = &trace;
  trace_prompt_text_ = std::move(prompt_text);
}

void CompletionExchange::write_trace(const GenerationUpdate& update) const {
  const RequestTimings& t = update.timings;
  TraceRecord record;
  record.arrival_s = std::chrono::duration<double>(request_->arrival - trace_->start()).count();
  record.endpoint = params_.kind == CompletionKind::chat ? "chat" : "completions";
  record.model = model_name_;
  record.input_tokens = static_cast<int>(request_->prompt_tokens.size());
  record.cached_tokens = t.cached_prompt_tokens;
  record.output_tokens = t.completion_tokens;
  if (request_->max_tokens_named) record.max_tokens = request_->max_tokens;
  record.finish_reason = finish_reason_name(update.finish_reason);
  record.priority = request_->priority;
  record.session = params_.session;
  // A request that ended before its first token (cancelled in the queue, past its deadline) has
  // no TTFT.
  if (t.completion_tokens > 0) record.ttft_ms = t.ttft_ms;
  record.e2e_ms = t.e2e_ms;
  record.block_tokens = trace_->options().block_tokens;
  record.hash_ids = prefix_block_hashes(request_->prompt_tokens, record.block_tokens);
  record.prompt = trace_prompt_text_;
  trace_->write(record);
}

void CompletionExchange::present_update(const GenerationUpdate& update) {
  if (params_.top_logprobs >= 0) logprobs_.append(update.logprobs);
  if (params_.stream) {
    stream_update(update);
  } else {
    text_ += update.text;
    if (update.finished()) respond_whole(update);
  }
}

void CompletionExchange::stream_update(const GenerationUpdate& update) {
  if (!update.finished()) {
    if (tool_parser_) {
      const auto changes = tool_parser_->append(update.text, false);
      if (!changes.empty())
        session_->send_event("data: " + delta_chunk_json(changes, nullptr) + "\n\n");
    } else if (!update.text.empty()) {
      session_->send_event("data: " + chunk_json(update.text, nullptr) + "\n\n");
    }
    return;
  }
  if (is_reportable(update.finish_reason)) {
    const std::string last =
        tool_parser_ ? delta_chunk_json(tool_parser_->append(update.text, true), &update)
                     : chunk_json(update.text, &update);
    session_->send_event("data: " + last + "\n\n");
    if (params_.include_usage) session_->send_event("data: " + usage_chunk_json(update) + "\n\n");
  } else {
    session_->send_event("data: " + error_chunk_json(update) + "\n\n");
  }
  session_->send_event("data: [DONE]\n\n");
  session_->end_event_stream();
}

void CompletionExchange::respond_whole(const GenerationUpdate& update) {
  if (!is_reportable(update.finish_reason)) {
    return session_->respond(error_response(unfinished_error(update)));
  }
  if (tool_parser_) tool_parser_->append(text_, true);
  json choice = {{"index", 0},
                 {"finish_reason", finish_reason(update)},
                 {"logprobs", choice_logprobs()}};
  if (tool_parser_) {
    const ParsedChatMessage& message = tool_parser_->message();
    json calls = json::array();
    for (const ToolCall& call : message.tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    choice["message"] = {{"role", "assistant"},
                         {"content", message.content.empty() && !calls.empty()
                                         ? json(nullptr)
                                         : json(message.content)}};
    if (!calls.empty()) choice["message"]["tool_calls"] = std::move(calls);
  } else if (params_.kind == CompletionKind::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  } else {
    choice["text"] = echo_ + text_;
  }
  json body = {
      {"id", id_},
      {"object", params_.kind == CompletionKind::chat ? "chat.completion" : "text_completion"},
      {"created", created_},
      {"model", model_name_},
      {"choices", json::array({choice})},
      {"usage", usage_json(update.timings)},
      {"brisk_timings", timings_json(update.timings)}};
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = dump_json(body);
  session_->respond(std::move(response));
}

// A content chunk; with `final_update`, the chunk that carries finish_reason and timings.
std::string CompletionExchange::chunk_json(const std::string& text,
                                           const GenerationUpdate* final_update) {
  json choice = {{"index", 0}, {"logprobs", choice_logprobs()}};
  choice["finish_reason"] = final_update ? json(finish_reason(*final_update)) : json(nullptr);
  const bool chat = params_.kind == CompletionKind::chat;
  if (chat) {
    json delta = json::object();
    if (!first_chunk_sent_) delta["role"] = "assistant";
    if (!text.empty() || !final_update) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_name_},
                {"choices", json::array({choice})}};
  if (final_update) chunk["brisk_timings"] = timings_json(final_update->timings);
  first_chunk_sent_ = true;
  return dump_json(chunk);
}

// "tool_calls" when the answer is calls (OpenAI's reason), else why generation ended.
std::string CompletionExchange::finish_reason(const GenerationUpdate& update) const {
  if (tool_parser_ && update.finish_reason == FinishReason::stop &&
      !tool_parser_->message().tool_calls.empty()) {
    return "tool_calls";
  }
  return finish_reason_name(update.finish_reason);
}

std::string CompletionExchange::delta_chunk_json(const std::vector<ChatDelta>& changes,
                                                 const GenerationUpdate* final_update) {
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
  json choice = {{"index", 0}, {"delta", delta}, {"logprobs", choice_logprobs()}};
  choice["finish_reason"] = final_update ? json(finish_reason(*final_update)) : json(nullptr);
  json chunk = {{"id", id_},
                {"object", "chat.completion.chunk"},
                {"created", created_},
                {"model", model_name_},
                {"choices", json::array({choice})}};
  if (final_update) chunk["brisk_timings"] = timings_json(final_update->timings);
  first_chunk_sent_ = true;
  return dump_json(chunk);
}

// The logprobs of the tokens since the last chunk (null when the request asked for none). A
// token whose text is held back by stop matching is reported with the next chunk that goes out.
json CompletionExchange::choice_logprobs() {
  if (params_.top_logprobs < 0) return nullptr;
  return logprobs_.take();
}

// Why a request ended without a result: the server is shutting down, or generation failed.
ApiError CompletionExchange::unfinished_error(const GenerationUpdate& update) {
  ApiError error;
  error.type = "server_error";
  if (update.finish_reason == FinishReason::deadline) {
    error.status = 408;
    error.type = "timeout_error";
    error.code = "deadline_exceeded";
    error.message = update.error;
  } else if (update.finish_reason == FinishReason::cancelled) {
    error.status = 503;
    error.code = "shutting_down";
    error.message = "the request was cancelled because the server is shutting down; retry it";
  } else {
    error.status = 500;
    error.code = "generation_failed";
    error.message = update.error;
  }
  return error;
}

// The last event of a stream that ends without a result: a chunk whose choice carries the
// finish_reason ("cancelled" or "error"), with an OpenAI error object that SDKs raise.
std::string CompletionExchange::error_chunk_json(const GenerationUpdate& update) {
  json chunk = json::parse(chunk_json("", &update));
  chunk["error"] = json::parse(unfinished_error(update).to_json())["error"];
  return dump_json(chunk);
}

std::string CompletionExchange::usage_chunk_json(const GenerationUpdate& update) const {
  json chunk = {{"id", id_},
                {"object", params_.kind == CompletionKind::chat ? "chat.completion.chunk"
                                                                : "text_completion"},
                {"created", created_},
                {"model", model_name_},
                {"choices", json::array()},
                {"usage", usage_json(update.timings)},
                {"brisk_timings", timings_json(update.timings)}};
  return dump_json(chunk);
}

void CompletionExchange::log_finished(const GenerationUpdate& update) const {
  const RequestTimings& t = update.timings;
  if (log_format() == LogFormat::json) {
    json fields = {{"event", "request"},
                   {"id", id_},
                   {"status", finish_reason_name(update.finish_reason)},
                   {"stream", params_.stream}};
    fields.update(timings_json(t));
    return spdlog::info(dump_json(fields));
  }
  spdlog::info(
      "request {} status={} prompt_tokens={} completion_tokens={} queue_ms={:.1f} "
      "ttft_ms={:.1f} e2e_ms={:.1f} stream={}",
      id_, finish_reason_name(update.finish_reason), t.prompt_tokens, t.completion_tokens,
      t.queue_ms, t.ttft_ms, t.e2e_ms, params_.stream);
}

}  // namespace brisk
