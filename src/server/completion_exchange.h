#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/chat_output.h"
#include "sched/engine_loop.h"
#include "sched/request.h"
#include "server/completion_choice.h"
#include "server/completion_params.h"
#include "server/http_session.h"
#include "server/trace_writer.h"

namespace brisk {

// One generation request seen from the HTTP side: turns the engine's updates for each of its
// choices (one request each) into an OpenAI response (whole, or SSE chunks), and cancels them
// all if the client goes away. Updates arrive on the engine thread and are replayed on the
// session's strand.
class CompletionExchange : public std::enable_shared_from_this<CompletionExchange> {
 public:
  // `system_fingerprint`: what every response and chunk says it (ServerOptions).
  CompletionExchange(std::shared_ptr<HttpSession> session, CompletionParams params,
                     std::string model_name, std::string system_fingerprint,
                     EngineLoop& engine_loop, const Engine& engine);

  // Adds the next choice (choice index = prompt index * n + i) and links its request to this
  // exchange; call in index order, before submitting. `tool_parser`: set when the chat has
  // tools; that choice's output is then parsed into content and tool calls.
  void add_choice(const std::shared_ptr<Request>& request, std::string echo,
                  std::shared_ptr<ChatOutputParser> tool_parser = nullptr);
  // The requests were not submitted: nobody will hear from them.
  void abandon();
  // After a successful submit: starts the stream or the disconnect watch.
  void begin();
  // Keeps the model loaded until the exchange ends; the response's brisk_timings say
  // model_load_ms when the request waited for its load.
  void hold_model(std::shared_ptr<const void> keep_loaded, double model_load_ms) {
    keep_loaded_ = std::move(keep_loaded);
    model_load_ms_ = model_load_ms;
  }
  // --trace-out: each finished choice is written to `trace` (with `prompt_texts[i]`, choice i's
  // prompt, under --trace-text). Call after the choices are added.
  void record_to(TraceWriter& trace, std::vector<std::string> prompt_texts);

 private:
  void on_update(size_t choice, const GenerationUpdate& update);
  void present_update(CompletionChoice& choice, const GenerationUpdate& update);
  void stream_update(CompletionChoice& choice, const GenerationUpdate& update);
  void end_stream();
  void respond_whole();
  void fail(const CompletionChoice& choice);
  bool all_finished() const;
  void cancel_all();
  RequestTimings response_timings() const;
  nlohmann::json timings_of(const RequestTimings& timings) const;
  nlohmann::json chunk_json(nlohmann::json choice, const CompletionChoice* finished) const;
  std::string usage_chunk_json() const;
  ApiError unfinished_error(const GenerationUpdate& update) const;
  void log_finished() const;
  void write_trace(const CompletionChoice& choice) const;

  std::shared_ptr<HttpSession> session_;
  CompletionParams params_;
  std::string model_name_;
  std::string system_fingerprint_;
  EngineLoop& engine_loop_;
  const Engine& engine_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<std::unique_ptr<CompletionChoice>> choices_;  // by index
  std::vector<std::weak_ptr<Request>> requests_;            // by index, for cancelling
  bool ended_ = false;  // the response is complete, or it failed: later updates are dropped
  TraceWriter* trace_ = nullptr;
  std::vector<std::string> trace_prompt_texts_;
  std::shared_ptr<const void> keep_loaded_;
  double model_load_ms_ = 0;
};

}  // namespace brisk
