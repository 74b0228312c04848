#pragma once

#include <memory>

#include "common/clock.h"
#include "engine/engine.h"
#include "sched/request.h"
#include "sched/serving_metrics.h"
#include "sched/stop_matcher.h"

namespace brisk {

// A request that holds a sequence id (slot) in the engine's context: its prompt progress,
// sampler, stop matching and timeline. Lives on the engine thread only.
class Sequence {
 public:
  Sequence(std::shared_ptr<Request> request, int slot, TimePoint scheduled_at);

  Request& request() { return *request_; }
  int slot() const { return slot_; }
  int kv_tokens() const { return kv_tokens_; }
  int prompt_remaining() const;
  bool prefill_done() const { return prompt_remaining() == 0; }
  bool finished() const { return finish_reason_ != FinishReason::none; }

  // Adds up to `budget` prompt tokens to the engine's batch; returns how many were added.
  int add_prefill_chunk(Engine& engine, int budget);
  // Adds the last sampled token to the batch.
  void add_decode_token(Engine& engine);
  int logits_index() const { return logits_index_; }

  Sampler& sampler() { return sampler_; }
  // Feeds a sampled token through EOS, stop strings and max_tokens, and reports new text.
  void accept_token(SampledToken sampled, const Engine& engine, ServingMetrics& metrics);
  void finish(FinishReason reason, ServingMetrics& metrics, std::string error = {});

 private:
  void emit(std::string text);
  void record_logprobs(SampledToken& sampled);

  std::shared_ptr<Request> request_;
  int slot_;
  Sampler sampler_;
  StopMatcher stop_matcher_;
  size_t prompt_cursor_ = 0;  // prompt tokens already in a batch
  int kv_tokens_ = 0;         // tokens of this sequence in the KV cache
  int logits_index_ = -1;     // where this sequence's logits sit in the current batch
  Token last_token_ = 0;
  int completion_tokens_ = 0;
  std::vector<GeneratedTokenLogprobs> pending_logprobs_;  // not yet in an update
  FinishReason finish_reason_ = FinishReason::none;
  TimePoint scheduled_at_;
  TimePoint first_token_at_;
  TimePoint last_token_at_;

  friend class StepScheduler;
};

}  // namespace brisk
