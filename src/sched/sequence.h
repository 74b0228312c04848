#pragma once

#include <algorithm>
#include <memory>
#include <span>

#include "common/clock.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "sched/request.h"
#include "sched/serving_metrics.h"
#include "sched/stop_matcher.h"

namespace brisk {

// A request that holds a sequence id (slot) in the engine's context: its prompt progress,
// sampler, stop matching and timeline. Lives on the engine thread only.
class Sequence {
 public:
  // `admission_order` ranks sequences by when they were first admitted (arrival order).
  Sequence(std::shared_ptr<Request> request, int slot, TimePoint scheduled_at,
           uint64_t admission_order);

  Request& request() { return *request_; }
  const Request& request_ref() const { return *request_; }
  int slot() const { return slot_; }
  uint64_t admission_order() const { return admission_order_; }
  int kv_tokens() const { return kv_tokens_; }
  // Tokens still to put into the KV cache before the next decode: the prompt's rest, or after
  // a preemption everything the sequence had in the cache (prompt + tokens generated so far).
  int prompt_remaining() const;
  bool prefill_done() const { return prompt_remaining() == 0; }
  // Tokens this prefill computes from its start (after a prefix-cache hit): a prompt's size
  // class is this, not what is left, so a long prompt stays long to its last chunk.
  int prefill_work_tokens() const { return static_cast<int>(prefill_target_ - prefill_start_); }
  // KV cells this sequence will hold once its prompt (or replay) is in: what admission counts.
  int committed_kv_tokens() const { return kv_tokens_ + prompt_remaining(); }

  // Preemption: the sequence gives up its KV cells and slot, keeping everything else (sampler,
  // stop matching, tokens generated). When it runs again it recomputes the cells it had from
  // the prompt and its generated tokens, without sampling, then decodes the token it had
  // sampled last: the stream goes on with no token repeated or lost.
  void preempt();
  // What preempt() would leave to recompute: the prompt and every generated token but the last.
  TokenList replay_tokens() const;
  void assign_slot(int slot) { slot_ = slot; }
  // What the prefill puts in the cache: the prompt, or after a preemption the replay.
  std::span<const Token> prefill_tokens() const;
  // The sequence's cache already holds its first `tokens` (a prefix-cache hit): the prefill
  // starts after them.
  void reuse_cached_prefix(int tokens);
  // The token at KV position `position` (prompt, then generated).
  Token token_at(size_t position) const;

  bool finished() const { return finish_reason_ != FinishReason::none; }
  FinishReason finish_reason() const { return finish_reason_; }
  int completion_tokens() const { return completion_tokens_; }
  // Prompt tokens its first admission reused from the prefix cache (0 before it).
  int cached_prompt_tokens() const { return std::max(0, cached_prompt_tokens_); }
  TimePoint scheduled_at() const { return scheduled_at_; }

  // A step's batch is filled from its plan (sched/step_plan.h) without moving the sequence
  // forward; the commit_ calls do that once the decode succeeded.
  // Puts the next `tokens` prompt (or replay) tokens in the batch; returns the batch index of
  // the last one's logits, or -1 when it needs none (not the prompt's end, or a replay).
  int put_prefill_chunk(ModelRunner& engine, int tokens) const;
  // Puts the last sampled token in the batch; returns the batch index of its logits.
  int put_decode_token(ModelRunner& engine) const;
  void commit_prefill_chunk(int tokens);
  void commit_decode_token() { ++kv_tokens_; }

  Sampler& sampler() { return sampler_; }
  // Feeds a sampled token (drawn at `now`) through EOS, stop strings and max_tokens, and
  // reports new text.
  void accept_token(SampledToken sampled, TimePoint now, const ModelRunner& engine,
                    ServingMetrics& metrics);
  void finish(FinishReason reason, TimePoint now, ServingMetrics& metrics, std::string error = {},
              bool request_fault = false);

 private:
  void emit(std::string text);
  void record_logprobs(SampledToken& sampled);

  std::shared_ptr<Request> request_;
  int slot_;
  uint64_t admission_order_;
  Sampler sampler_;
  StopMatcher stop_matcher_;
  // The prompt followed by every token accepted but the last, when the sequence resumes.
  TokenList replay_;

  size_t prompt_cursor_ = 0;  // prompt (or replay) tokens already in a batch
  size_t prefill_start_ = 0;  // where this prefill began: after a cached prefix, or 0
  size_t prefill_target_;     // tokens the prefill puts in the cache: the prompt, or the replay
  TokenList generated_;       // every token accepted so far
  int kv_tokens_ = 0;         // tokens of this sequence in the KV cache
  Token last_token_ = 0;
  int completion_tokens_ = 0;
  int cached_prompt_tokens_ = -1;  // tokens reused on first admission (-1: not admitted yet)
  std::vector<GeneratedTokenLogprobs> pending_logprobs_;  // not yet in an update
  FinishReason finish_reason_ = FinishReason::none;
  TimePoint scheduled_at_;
  TimePoint first_token_at_;
  TimePoint last_token_at_;
};

}  // namespace brisk
