#include "sched/sequence.h"

#include <algorithm>

namespace brisk {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
    case FinishReason::none:
      break;
  }
  return "none";
}

Sequence::Sequence(std::shared_ptr<Request> request, int slot, TimePoint scheduled_at)
    : request_(std::move(request)),
      slot_(slot),
      sampler_(request_->sampling),
      stop_matcher_(request_->stop),
      scheduled_at_(scheduled_at) {}

int Sequence::prompt_remaining() const {
  return static_cast<int>(request_->prompt_tokens.size() - prompt_cursor_);
}

int Sequence::add_prefill_chunk(Engine& engine, int budget) {
  const int chunk = std::min(budget, prompt_remaining());
  logits_index_ = -1;
  for (int i = 0; i < chunk; ++i) {
    const bool last_prompt_token = prompt_cursor_ + 1 == request_->prompt_tokens.size();
    const int index = engine.add_to_batch(request_->prompt_tokens[prompt_cursor_], kv_tokens_,
                                          slot_, last_prompt_token);
    if (last_prompt_token) logits_index_ = index;
    ++prompt_cursor_;
    ++kv_tokens_;
  }
  return chunk;
}

void Sequence::add_decode_token(Engine& engine) {
  logits_index_ = engine.add_to_batch(last_token_, kv_tokens_, slot_, true);
  ++kv_tokens_;
}

void Sequence::accept_token(SampledToken sampled, const Engine& engine, ServingMetrics& metrics) {
  const Token token = sampled.token;
  const TimePoint now = Clock::now();
  if (completion_tokens_ == 0) {
    first_token_at_ = now;
    metrics.observe_first_token(seconds_between(request_->arrival, now));
  } else {
    metrics.observe_inter_token(seconds_between(last_token_at_, now));
  }
  last_token_at_ = now;
  last_token_ = token;
  ++completion_tokens_;

  if (!request_->ignore_eos && engine.is_end_of_generation(token)) {
    emit(stop_matcher_.flush());
    finish(FinishReason::stop, metrics);
    return;
  }
  record_logprobs(sampled);
  StopMatcher::Result matched = stop_matcher_.push(engine.token_piece(token));
  if (matched.stopped) {
    emit(std::move(matched.releasable));
    finish(FinishReason::stop, metrics);
    return;
  }
  if (completion_tokens_ >= request_->max_tokens) {
    emit(matched.releasable + stop_matcher_.flush());
    finish(FinishReason::length, metrics);
    return;
  }
  emit(std::move(matched.releasable));
}

// The end-of-generation token is not part of the output, so it has no logprobs entry.
void Sequence::record_logprobs(SampledToken& sampled) {
  if (request_->top_logprobs < 0) return;
  pending_logprobs_.push_back({sampled.token, sampled.logprob, std::move(sampled.top_logprobs)});
}

void Sequence::emit(std::string text) {
  GenerationUpdate update;
  update.text = std::move(text);
  update.completion_tokens = completion_tokens_;
  update.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  request_->on_update(std::move(update));
}

void Sequence::finish(FinishReason reason, ServingMetrics& metrics, std::string error) {
  if (finished()) return;
  finish_reason_ = reason;
  const TimePoint now = Clock::now();
  RequestTimings timings;
  timings.queue_ms = ms_between(request_->arrival, scheduled_at_);
  timings.e2e_ms = ms_between(request_->arrival, now);
  if (completion_tokens_ > 0) {
    timings.prefill_ms = ms_between(scheduled_at_, first_token_at_);
    timings.ttft_ms = ms_between(request_->arrival, first_token_at_);
    timings.decode_ms = ms_between(first_token_at_, now);
  }
  timings.prompt_tokens = static_cast<int>(request_->prompt_tokens.size());
  timings.completion_tokens = completion_tokens_;
  metrics.observe_finished(timings, reason);

  GenerationUpdate update;
  update.completion_tokens = completion_tokens_;
  update.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  update.finish_reason = reason;
  update.error = std::move(error);
  update.timings = timings;
  request_->on_update(std::move(update));
}

}  // namespace brisk
