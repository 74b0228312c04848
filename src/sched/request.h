#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/sampler.h"
#include "engine/token.h"
#include "engine/token_constraint.h"

namespace brisk {

// deadline: dropped before its first token because its deadline passed (never computed).
enum class FinishReason { none, stop, length, cancelled, error, deadline };

const char* finish_reason_name(FinishReason reason);

// Where a request's time went, in milliseconds; the `brisk_timings` object of a response.
struct RequestTimings {
  double queue_ms = 0;    // arrival → first scheduled in a step
  double prefill_ms = 0;  // first scheduled → first token
  double ttft_ms = 0;     // arrival → first token
  double decode_ms = 0;   // first token → finish
  double e2e_ms = 0;      // arrival → finish
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // of prompt_tokens: KV cells reused from the prefix cache
  int completion_tokens = 0;
};

// One generated token's log-probability and the most likely alternatives (OpenAI logprobs).
struct GeneratedTokenLogprobs {
  Token token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

// What the engine thread reports to a request's owner: new text, and at the end why it ended.
struct GenerationUpdate {
  std::string text;           // new UTF-8-complete text since the last update (may be empty)
  int completion_tokens = 0;  // tokens generated so far
  // Tokens generated since the last update, when the request asked for logprobs. The text of a
  // token held back by stop-string matching arrives in a later update than its logprobs.
  std::vector<GeneratedTokenLogprobs> logprobs;
  FinishReason finish_reason = FinishReason::none;
  std::string error;       // set when finish_reason == error
  // The error is the request's own: its output format allowed no next token (a 400 naming the
  // field, not a server failure).
  bool request_fault = false;
  RequestTimings timings;  // set on the final update

  bool finished() const { return finish_reason != FinishReason::none; }
};

// Called on the engine thread: must be cheap and must not block (post to an I/O thread).
using UpdateSink = std::function<void(GenerationUpdate&&)>;

struct Request {
  uint64_t id = 0;
  TokenList prompt_tokens;
  SamplingParams sampling;
  // Only what this allows is generated (response_format, grammar); null: anything.
  std::shared_ptr<TokenConstraint> constraint;
  int top_logprobs = -1;  // < 0: no logprobs; 0: the chosen token's; N: and the N most likely
  int max_tokens = 0;
  // The client (or --override-generation-config) named max_tokens; else it is whatever the
  // context leaves, which says nothing about how long the request will run.
  bool max_tokens_named = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Lower runs sooner under --policy priority (vLLM's convention); 0 by default.
  int priority = 0;
  // Milliseconds after arrival by which the first token must come; a request still waiting
  // then is dropped with an error instead of computed (0: none).
  double deadline_ms = 0;
  TimePoint arrival;
  UpdateSink on_update;
  // n > 1: a later choice of the same prompt names the first one. It waits in the queue until
  // that one's prompt is in the KV cache, then copies its cells (KvManager::lookup_in with
  // shared_prompt) instead of computing them: one prefill for n choices.
  std::shared_ptr<const Request> shares_prompt_of;
  // Engine thread: this request's prompt is in the KV cache, or it ended before that; the
  // choices that share its prompt may start.
  bool prompt_ready_to_share = false;
  // Set by any thread (a client that went away); the engine thread acts on it next step.
  std::atomic<bool> cancelled{false};
};

// The prompt tokens a queued request will compute, for the queue's limits and wait estimates: a
// later choice of an n > 1 request copies its first choice's cells and computes one.
inline int queued_prefill_tokens(const Request& request) {
  return request.shares_prompt_of ? 1 : static_cast<int>(request.prompt_tokens.size());
}

}  // namespace brisk
