#include "server/completion_exchange.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
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

}  // namespace

CompletionExchange::CompletionExchange(std::shared_ptr<HttpSession> session,
                                       CompletionParams params, std::string model_name,
                                       std::string system_fingerprint, EngineLoop& engine_loop,
                                       const Engine& engine)
    : session_(std::move(session)),
      params_(std::move(params)),
      model_name_(std::move(model_name)),
      system_fingerprint_(std::move(system_fingerprint)),
      engine_loop_(engine_loop),
      engine_(engine),
      id_(next_completion_id(params_.kind)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

void CompletionExchange::add_choice(const std::shared_ptr<Request>& request, std::string echo,
                                    std::shared_ptr<ChatOutputParser> tool_parser) {
  const size_t index = choices_.size();
  choices_.push_back(std::make_unique<CompletionChoice>(static_cast<int>(index), params_.kind,
                                                        engine_, params_.top_logprobs >= 0,
                                                        std::move(echo), std::move(tool_parser)));
  choices_.back()->request = request;
  requests_.push_back(request);
  auto executor = session_->executor();
  request->on_update = [self = shared_from_this(), executor, index](GenerationUpdate&& update) {
    net::post(executor,
              [self, index, update = std::move(update)] { self->on_update(index, update); });
  };
}

void CompletionExchange::abandon() {
  for (auto& choice : choices_) {
    if (!choice->request) continue;
    choice->request->on_update = nullptr;
    choice->request.reset();
  }
}

void CompletionExchange::begin() {
  if (params_.stream) {
    session_->begin_event_stream(200, "text/event-stream");
    for (auto& choice : choices_) {
      if (choice->echo().empty()) continue;
      session_->send_event(
          "data: " + dump_json(chunk_json(choice->text_choice(choice->echo(), false), nullptr)) +
          "\n\n");
    }
  }
  session_->watch_for_disconnect([self = weak_from_this()] {
    if (auto exchange = self.lock()) exchange->cancel_all();
  });
}

void CompletionExchange::cancel_all() {
  for (const auto& weak_request : requests_) {
    if (auto request = weak_request.lock()) request->cancelled = true;
  }
  engine_loop_.wake();
}

// Runs on the session's strand: a failure here ends this response, never the I/O thread.
void CompletionExchange::on_update(size_t index, const GenerationUpdate& update) {
  CompletionChoice& choice = *choices_[index];
  if (!choice.request) return;  // the response already failed
  if (!ended_) {
    try {
      present_update(choice, update);
    } catch (const std::exception& e) {
      spdlog::error("request {}: writing its response failed: {}", id_, e.what());
      ended_ = true;
      cancel_all();
      session_->abort();
    }
  }
  if (!update.finished()) return;
  if (trace_) write_trace(choice);
  choice.request.reset();
  const bool last = std::none_of(choices_.begin(), choices_.end(),
                                 [](const auto& c) { return c->request != nullptr; });
  if (last) log_finished();
}

void CompletionExchange::record_to(TraceWriter& trace, std::vector<std::string> prompt_texts) {
  trace_ = &trace;
  trace_prompt_texts_ = std::move(prompt_texts);
}

void CompletionExchange::write_trace(const CompletionChoice& choice) const {
  const Request& request = *choice.request;
  const GenerationUpdate& update = choice.final_update();
  const RequestTimings& t = update.timings;
  TraceRecord record;
  record.arrival_s = std::chrono::duration<double>(request.arrival - trace_->start()).count();
  record.endpoint = params_.kind == CompletionKind::chat ? "chat" : "completions";
  record.model = model_name_;
  record.input_tokens = static_cast<int>(request.prompt_tokens.size());
  record.cached_tokens = t.cached_prompt_tokens;
  record.output_tokens = t.completion_tokens;
  if (request.max_tokens_named) record.max_tokens = request.max_tokens;
  record.finish_reason = finish_reason_name(update.finish_reason);
  record.priority = request.priority;
  record.session = params_.session;
  // A request that ended before its first token (cancelled in the queue, past its deadline) has
  // no TTFT.
  if (t.completion_tokens > 0) record.ttft_ms = t.ttft_ms;
  record.e2e_ms = t.e2e_ms;
  record.block_tokens = trace_->options().block_tokens;
  record.hash_ids = prefix_block_hashes(request.prompt_tokens, record.block_tokens);
  const auto index = static_cast<size_t>(choice.index());
  if (index < trace_prompt_texts_.size()) record.prompt = trace_prompt_texts_[index];
  trace_->write(record);
}

void CompletionExchange::present_update(CompletionChoice& choice, const GenerationUpdate& update) {
  choice.take(update, params_.stream);
  if (update.finished() && !choice.reportable()) return fail(choice);
  if (params_.stream) return stream_update(choice, update);
  if (all_finished()) respond_whole();
}

void CompletionExchange::stream_update(CompletionChoice& choice, const GenerationUpdate& update) {
  json piece = choice.stream_choice(update);
  if (!piece.is_null()) {
    session_->send_event(
        "data: " + dump_json(chunk_json(std::move(piece), update.finished() ? &choice : nullptr)) +
        "\n\n");
  }
  if (update.finished() && all_finished()) end_stream();
}

// Every choice has its last chunk: the usage (once, for all of them) and the end.
void CompletionExchange::end_stream() {
  if (params_.include_usage) session_->send_event("data: " + usage_chunk_json() + "\n\n");
  session_->send_event("data: [DONE]\n\n");
  session_->end_event_stream();
  ended_ = true;
}

// A choice ended without a result (shutting down, failed, past its deadline): the response
// fails as a whole, and the other choices stop.
void CompletionExchange::fail(const CompletionChoice& choice) {
  ended_ = true;
  cancel_all();
  const ApiError error = unfinished_error(choice.final_update());
  if (!params_.stream) return session_->respond(error_response(error));
  // The last event of the stream: a chunk whose choice carries the finish_reason ("cancelled"
  // or "error"), with an OpenAI error object that SDKs raise.
  json chunk =
      chunk_json({{"index", choice.index()},
                  {"finish_reason", finish_reason_name(choice.final_update().finish_reason)},
                  {"logprobs", nullptr},
                  {params_.kind == CompletionKind::chat ? "delta" : "text",
                   params_.kind == CompletionKind::chat ? json::object() : json("")}},
                 &choice);
  chunk["error"] = json::parse(error.to_json())["error"];
  session_->send_event("data: " + dump_json(chunk) + "\n\n");
  session_->send_event("data: [DONE]\n\n");
  session_->end_event_stream();
}

bool CompletionExchange::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->finished(); });
}

void CompletionExchange::respond_whole() {
  json choices = json::array();
  for (auto& choice : choices_) choices.push_back(choice->whole_choice());
  const RequestTimings timings = response_timings();
  json body = {
      {"id", id_},
      {"object", params_.kind == CompletionKind::chat ? "chat.completion" : "text_completion"},
      {"created", created_},
      {"model", model_name_},
      {"system_fingerprint", system_fingerprint_},
      {"choices", std::move(choices)},
      {"usage", usage_json(timings)},
      {"brisk_timings", timings_of(timings)}};
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = dump_json(body);
  session_->respond(std::move(response));
  ended_ = true;
}

json CompletionExchange::timings_of(const RequestTimings& timings) const {
  json out = timings_json(timings);
  if (model_load_ms_ > 0) out["model_load_ms"] = std::round(model_load_ms_ * 10) / 10;
  return out;
}

// A chunk around one choice object; the chunk that finishes a choice carries its timings.
json CompletionExchange::chunk_json(json choice, const CompletionChoice* finished) const {
  const bool chat = params_.kind == CompletionKind::chat;
  json chunk = {{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_name_},
      {"system_fingerprint", system_fingerprint_},
                {"choices", json::array({std::move(choice)})}};
  if (finished) chunk["brisk_timings"] = timings_of(finished->final_update().timings);
  return chunk;
}

// The response's usage and timings: each prompt counted once (its first choice's; the others
// shared its cells or computed the same tokens again), the completions of every choice summed,
// the first token the earliest of any choice, the end the latest.
RequestTimings CompletionExchange::response_timings() const {
  if (choices_.size() == 1) return choices_.front()->final_update().timings;
  RequestTimings out;
  bool first = true;
  for (const auto& choice : choices_) {
    const RequestTimings& t = choice->final_update().timings;
    if (choice->index() % params_.n == 0) {
      out.prompt_tokens += t.prompt_tokens;
      out.cached_prompt_tokens += t.cached_prompt_tokens;
    }
    out.completion_tokens += t.completion_tokens;
    out.queue_ms = first ? t.queue_ms : std::min(out.queue_ms, t.queue_ms);
    if (t.completion_tokens > 0) {
      out.ttft_ms = out.ttft_ms > 0 ? std::min(out.ttft_ms, t.ttft_ms) : t.ttft_ms;
    }
    out.e2e_ms = std::max(out.e2e_ms, t.e2e_ms);
    first = false;
  }
  if (out.ttft_ms > 0) {
    out.prefill_ms = std::max(0.0, out.ttft_ms - out.queue_ms);
    out.decode_ms = std::max(0.0, out.e2e_ms - out.ttft_ms);
  }
  return out;
}

// Why a request ended without a result: the server is shutting down, or generation failed.
ApiError CompletionExchange::unfinished_error(const GenerationUpdate& update) const {
  ApiError error;
  error.type = "server_error";
  if (update.request_fault) {
    error = ApiError::invalid(update.error, params_.grammar ? params_.grammar_field : "tools");
    error.code = "output_format_dead_end";
  } else if (update.finish_reason == FinishReason::deadline) {
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

std::string CompletionExchange::usage_chunk_json() const {
  const RequestTimings timings = response_timings();
  json chunk = {{"id", id_},
                {"object", params_.kind == CompletionKind::chat ? "chat.completion.chunk"
                                                                : "text_completion"},
                {"created", created_},
                {"model", model_name_},
      {"system_fingerprint", system_fingerprint_},
                {"choices", json::array()},
                {"usage", usage_json(timings)},
                {"brisk_timings", timings_of(timings)}};
  return dump_json(chunk);
}

void CompletionExchange::log_finished() const {
  const RequestTimings t = response_timings();
  FinishReason status = choices_.front()->final_update().finish_reason;
  for (const auto& choice : choices_) {
    if (choice->finished() && !choice->reportable()) {
      status = choice->final_update().finish_reason;
      break;
    }
  }
  if (log_format() == LogFormat::json) {
    json fields = {{"event", "request"},
                   {"id", id_},
                   {"status", finish_reason_name(status)},
                   {"stream", params_.stream},
                   {"choices", choices_.size()}};
    fields.update(timings_of(t));
    return spdlog::info(dump_json(fields));
  }
  spdlog::info(
      "request {} status={} choices={} prompt_tokens={} completion_tokens={} queue_ms={:.1f} "
      "ttft_ms={:.1f} e2e_ms={:.1f} stream={}",
      id_, finish_reason_name(status), choices_.size(), t.prompt_tokens, t.completion_tokens,
      t.queue_ms, t.ttft_ms, t.e2e_ms, params_.stream);
}

}  // namespace brisk
