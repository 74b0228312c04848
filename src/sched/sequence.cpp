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
    case FinishReason::deadline:
      return "deadline";
    case FinishReason::none:
      break;
  }
  return "none";
}

Sequence::Sequence(std::shared_ptr<Request> request, int slot, TimePoint scheduled_at,
                   uint64_t admission_order)
    : request_(std::move(request)),
      slot_(slot),
      admission_order_(admission_order),
      sampler_(request_->sampling, request_->constraint),
      stop_matcher_(request_->stop),
      prefill_target_(request_->prompt_tokens.size()),
      scheduled_at_(scheduled_at) {
  sampler_.add_prompt(request_->prompt_tokens);
}

int Sequence::prompt_remaining() const {
  return static_cast<int>(prefill_target_ - prompt_cursor_);
}

Token Sequence::token_at(size_t position) const {
  const TokenList& prompt = request_->prompt_tokens;
  return position < prompt.size() ? prompt[position] : generated_[position - prompt.size()];
}

std::span<const Token> Sequence::prefill_tokens() const {
  if (prefill_target_ <= request_->prompt_tokens.size()) {
    return std::span<const Token>(request_->prompt_tokens).first(prefill_target_);
  }
  return std::span<const Token>(replay_).first(prefill_target_);
}

void Sequence::reuse_cached_prefix(int tokens) {
  if (cached_prompt_tokens_ < 0) {
    cached_prompt_tokens_ = std::min(tokens, static_cast<int>(request_->prompt_tokens.size()));
  }
  prompt_cursor_ = static_cast<size_t>(tokens);
  prefill_start_ = prompt_cursor_;
  kv_tokens_ = tokens;
}

int Sequence::put_prefill_chunk(ModelRunner& engine, int tokens) const {
  // A replay ends on a token whose successor was sampled before the preemption: no logits.
  const bool sample_at_end = completion_tokens_ == 0;
  int logits_index = -1;
  for (int i = 0; i < tokens; ++i) {
    const size_t cursor = prompt_cursor_ + static_cast<size_t>(i);
    const bool last = cursor + 1 == prefill_target_;
    const int index =
        engine.add_to_batch(token_at(cursor), kv_tokens_ + i, slot_, last && sample_at_end);
    if (last && sample_at_end) logits_index = index;
  }
  return logits_index;
}

void Sequence::commit_prefill_chunk(int tokens) {
  prompt_cursor_ += static_cast<size_t>(tokens);
  kv_tokens_ += tokens;
  if (prompt_cursor_ >= request_->prompt_tokens.size()) request_->prompt_ready_to_share = true;
}

TokenList Sequence::replay_tokens() const {
  // The cache held the prompt and every generated token but the last, which is the input of
  // the next decode.
  TokenList replay = request_->prompt_tokens;
  replay.insert(replay.end(), generated_.begin(),
                generated_.begin() + std::max(0, completion_tokens_ - 1));
  return replay;
}

void Sequence::preempt() {
  replay_ = replay_tokens();
  prefill_target_ = replay_.size();
  prompt_cursor_ = 0;
  prefill_start_ = 0;
  kv_tokens_ = 0;
  slot_ = -1;
}

int Sequence::put_decode_token(ModelRunner& engine) const {
  return engine.add_to_batch(last_token_, kv_tokens_, slot_, true);
}

void Sequence::accept_token(SampledToken sampled, TimePoint now, const ModelRunner& engine,
                            ServingMetrics& metrics) {
  if (sampled.constraint_dead_end) {
    emit(stop_matcher_.flush());
    finish(FinishReason::error, now, metrics,
           "the output format allows no next token after " + std::to_string(completion_tokens_) +
               " generated: the schema, grammar or tool-call syntax admits nothing the model's "
               "vocabulary can continue with here",
           true);
    return;
  }
  const Token token = sampled.token;
  if (completion_tokens_ == 0) {
    first_token_at_ = now;
    metrics.observe_first_token(seconds_between(request_->arrival, now));
  } else {
    metrics.observe_inter_token(seconds_between(last_token_at_, now));
  }
  last_token_at_ = now;
  last_token_ = token;
  generated_.push_back(token);
  ++completion_tokens_;

  if (!request_->ignore_eos && engine.is_end_of_generation(token)) {
    emit(stop_matcher_.flush());
    finish(FinishReason::stop, now, metrics);
    return;
  }
  record_logprobs(sampled);
  StopMatcher::Result matched = stop_matcher_.push(engine.token_piece(token));
  if (matched.stopped) {
    emit(std::move(matched.releasable));
    finish(FinishReason::stop, now, metrics);
    return;
  }
  if (completion_tokens_ >= request_->max_tokens) {
    emit(matched.releasable + stop_matcher_.flush());
    finish(FinishReason::length, now, metrics);
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

void Sequence::finish(FinishReason reason, TimePoint now, ServingMetrics& metrics,
                      std::string error, bool request_fault) {
  if (finished()) return;
  finish_reason_ = reason;
  request_->prompt_ready_to_share = true;  // the choices waiting for its prompt go on alone
  RequestTimings timings;
  timings.queue_ms = ms_between(request_->arrival, scheduled_at_);
  timings.e2e_ms = ms_between(request_->arrival, now);
  if (completion_tokens_ > 0) {
    timings.prefill_ms = ms_between(scheduled_at_, first_token_at_);
    timings.ttft_ms = ms_between(request_->arrival, first_token_at_);
    timings.decode_ms = ms_between(first_token_at_, now);
  }
  timings.prompt_tokens = static_cast<int>(request_->prompt_tokens.size());
  timings.cached_prompt_tokens = std::max(0, cached_prompt_tokens_);
  timings.completion_tokens = completion_tokens_;
  metrics.observe_finished(timings, reason);

  GenerationUpdate update;
  update.completion_tokens = completion_tokens_;
  update.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  update.finish_reason = reason;
  update.error = std::move(error);
  update.request_fault = request_fault;
  update.timings = timings;
  request_->on_update(std::move(update));
}

}  // namespace brisk
