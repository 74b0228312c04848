#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/chat_output.h"
#include "engine/engine.h"
#include "sched/request.h"
#include "server/logprobs_json.h"
#include "server/request_fields.h"

namespace brisk {

// One choice of a response (`n` > 1 and prompt lists give several): its request, what it
// generated, and its part of the response, whole or streamed (OpenAI's choice objects). Used on
// its exchange's strand only.
class CompletionChoice {
 public:
  // `echo`: completions with echo, the prompt's text first. `tool_parser`: set when the chat has
  // tools; the output is then parsed into content and tool calls.
  CompletionChoice(int index, CompletionKind kind, const Engine& engine, bool logprobs,
                   std::string echo, std::shared_ptr<ChatOutputParser> tool_parser);

  int index() const { return index_; }
  const std::string& echo() const { return echo_; }
  // The engine's request for this choice; dropped on its final update (breaks the cycle the
  // request's update sink makes with the exchange).
  std::shared_ptr<Request> request;

  // Takes an update's logprobs and, for a whole response, its text; a final update is kept.
  void take(const GenerationUpdate& update, bool streamed);
  bool finished() const { return final_.finished(); }
  // Finished with a result (stop or length), not cancelled, failed or past its deadline.
  bool reportable() const;
  const GenerationUpdate& final_update() const { return final_; }

  // Streamed: the choice object of a chunk for this update, or null when it carries nothing.
  nlohmann::json stream_choice(const GenerationUpdate& update);
  // A streamed choice object with `text` (chat: a delta), with finish_reason when `final`.
  nlohmann::json text_choice(const std::string& text, bool final);
  // The choice object of a whole response.
  nlohmann::json whole_choice();

 private:
  nlohmann::json delta_choice(const std::vector<ChatDelta>& changes, bool final);
  nlohmann::json finish_reason_json(bool final) const;
  nlohmann::json logprobs_json();

  int index_;
  CompletionKind kind_;
  bool logprobs_wanted_;
  std::string echo_;
  std::shared_ptr<ChatOutputParser> tool_parser_;
  LogprobsJson logprobs_;
  std::string text_;  // a whole response's completion
  bool first_chunk_sent_ = false;
  GenerationUpdate final_;  // its finish_reason and timings once finished
};

}  // namespace brisk
