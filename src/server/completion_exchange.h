#pragma once

#include <memory>
#include <string>

#include "engine/chat_output.h"
#include "sched/request.h"
#include "sched/engine_loop.h"
#include "server/completion_params.h"
#include "server/http_session.h"
#include "server/logprobs_json.h"
#include "server/trace_writer.h"

namespace brisk {

// One generation request seen from the HTTP side: turns the engine's updates into an OpenAI
// response (whole, or SSE chunks), and cancels the request if its client goes away.
// Updates arrive on the engine thread and are replayed on the session's strand.
class CompletionExchange : public std::enable_shared_from_this<CompletionExchange> {
 public:
  // `tool_parser`: set when the chat has tools; the output is then parsed into content and
  // tool calls (message.tool_calls, streamed as delta.tool_calls).
  CompletionExchange(std::shared_ptr<HttpSession> session, CompletionParams params,
                     std::string model_name, EngineLoop& engine_loop, const Engine& engine,
                     std::shared_ptr<ChatOutputParser> tool_parser = nullptr);

  // Links the request to this exchange; call before submitting it.
  void attach(const std::shared_ptr<Request>& request);
  // After a successful submit: starts the stream or the disconnect watch.
  void begin();
  // --trace-out: the finished request is written to `trace` (with `prompt_text` under
  // --trace-text). Call after attach().
  void record_to(TraceWriter& trace, std::string prompt_text);

 private:
  void on_update(const GenerationUpdate& update);
  void present_update(const GenerationUpdate& update);
  void stream_update(const GenerationUpdate& update);
  void respond_whole(const GenerationUpdate& update);
  std::string chunk_json(const std::string& text, const GenerationUpdate* final_update);
  // A chat chunk from the parser's changes (content and tool-call pieces).
  std::string delta_chunk_json(const std::vector<ChatDelta>& changes,
                               const GenerationUpdate* final_update);
  std::string finish_reason(const GenerationUpdate& update) const;
  nlohmann::json choice_logprobs();
  std::string usage_chunk_json(const GenerationUpdate& update) const;
  std::string error_chunk_json(const GenerationUpdate& update);
  static ApiError unfinished_error(const GenerationUpdate& update);
  void log_finished(const GenerationUpdate& update) const;
  void write_trace(const GenerationUpdate& update) const;

  std::shared_ptr<HttpSession> session_;
  CompletionParams params_;
  std::string model_name_;
  EngineLoop& engine_loop_;
  std::shared_ptr<Request> request_;  // dropped on the final update (breaks the cycle)
  std::shared_ptr<ChatOutputParser> tool_parser_;
  std::string id_;
  int64_t created_ = 0;
  std::string text_;  // non-streaming: the whole completion
  std::string echo_;  // completions with echo: the prompt's text, first in the answer
  LogprobsJson logprobs_;
  bool first_chunk_sent_ = false;
  TraceWriter* trace_ = nullptr;
  std::string trace_prompt_text_;
};

}  // namespace brisk
