#include "sched/step_costs.h"

#include <algorithm>
#include <cmath>

namespace brisk {

namespace {

double blend(double average, double sample, double weight) {
  return average <= 0 ? sample : (1 - weight) * average + weight * sample;
}

}  // namespace

void StepCosts::learn_step(int decode_tokens, int prefill_tokens, double step_ms) {
  constexpr double kWeight = 0.2;
  constexpr double kRecentWeight = 0.05;
  recent_step_ms_ = blend(recent_step_ms_, step_ms, kRecentWeight);
  if (prefill_tokens == 0) {
    if (decode_tokens <= 0) return;
    double& average = decode_ms_by_batch_[decode_tokens];
    average = blend(average, step_ms, kWeight);
    last_decode_batch_ = decode_tokens;
    ++decode_steps_measured_;
  } else if (prefill_tokens >= kMinChunkTokens) {
    // A few prompt tokens say more about the step's fixed cost than about a token's. The
    // decodes' part is their own batch's: priced at another batch's (the last one measured,
    // while prompts kept every step busy), it was charged to the prompt tokens.
    // A step of prompt tokens alone still pays what any step costs: a one-token step's time
    // (0 until one was measured). Charged to its tokens, it made small chunks look dear, and
    // chunks cut to the target shrank towards the floor (a 2,900-token prompt took 67 s, not 7).
    const double decode_part = decode_step_ms(std::max(1, decode_tokens));
    prefill_ms_per_token_ = blend(prefill_ms_per_token_,
                                  std::max(0.0, step_ms - decode_part) / prefill_tokens, kWeight);
  }
}

double StepCosts::decode_step_ms(int batch) const {
  if (decode_ms_by_batch_.empty() || batch <= 0) return 0;
  const auto above = decode_ms_by_batch_.lower_bound(batch);
  if (above != decode_ms_by_batch_.end() && above->first == batch) return above->second;
  const auto slope = [](auto low, auto high) {
    return std::max(0.0, (high->second - low->second) / (high->first - low->first));
  };
  if (above == decode_ms_by_batch_.begin()) {  // below every batch measured
    const auto next = std::next(above);
    // Never below its share of the smallest batch's step.
    const double share = above->second * batch / above->first;
    if (next == decode_ms_by_batch_.end()) return share;
    return std::max(share, above->second - slope(above, next) * (above->first - batch));
  }
  const auto below = std::prev(above);
  if (above == decode_ms_by_batch_.end()) {  // beyond every batch measured
    if (below == decode_ms_by_batch_.begin()) return below->second;
    return below->second + slope(std::prev(below), below) * (batch - below->first);
  }
  return below->second + slope(below, above) * (batch - below->first);
}

void StepCosts::learn_hold(double held_steps) {
  constexpr double kWeight = 0.1;
  mean_hold_steps_ = blend(mean_hold_steps_, std::max(1.0, held_steps), kWeight);
}

int StepCosts::chunk_floor(int decode_tokens) const {
  return std::max(kMinChunkTokens, min_prefill_step_tokens_ - decode_tokens);
}

int StepCosts::prefill_budget(int decode_tokens) const {
  const int token_budget = max_batched_tokens_ - decode_tokens;
  if (target_step_ms_ <= 0 || decode_tokens == 0 || prefill_ms_per_token_ <= 0) {
    return token_budget;
  }
  const double spare_ms = target_step_ms_ - decode_step_ms(decode_tokens);
  const int timed_budget = static_cast<int>(spare_ms / prefill_ms_per_token_);
  return std::min(token_budget, std::max(chunk_floor(decode_tokens), timed_budget));
}

int StepCosts::long_chunk_budget(int decode_tokens) const {
  if (decode_tokens > 0) return prefill_budget(decode_tokens);
  // Until a decode step is measured, a step's fixed cost is unknown and would be charged to
  // the chunk's tokens: keep the whole budget.
  const double fixed_ms = decode_step_ms(1);
  if (target_step_ms_ <= 0 || prefill_ms_per_token_ <= 0 || fixed_ms <= 0) {
    return max_batched_tokens_;
  }
  const int timed_budget = static_cast<int>((target_step_ms_ - fixed_ms) / prefill_ms_per_token_);
  const int floor = std::max(
      chunk_floor(0),
      static_cast<int>(std::ceil(kMinAloneChunkOverFixedCost * fixed_ms / prefill_ms_per_token_)));
  return std::min(max_batched_tokens_, std::max(floor, timed_budget));
}

double estimate_queue_delay_ms(const LoadEstimate& load, int queued_tokens, int queued_requests,
                               int max_batched_tokens) {
  // Prompt work ahead, in steps shared with the running decodes (once a prompt token's cost
  // is measured).
  const int tokens_ahead = queued_tokens + load.backlog_tokens;
  double wait = tokens_ahead * load.prefill_ms_per_token;
  if (load.prefill_ms_per_token > 0 && load.decoders > 0 && tokens_ahead > 0) {
    const int per_step = std::max(1, max_batched_tokens - load.decoders);
    wait += std::ceil(static_cast<double>(tokens_ahead) / per_step) * load.decode_step_ms;
  }
  // No sequence free for it (nor for those ahead): it waits for as many running requests to
  // finish as stand ahead of it; past one round of the running set, each sequence frees again
  // after the average hold (0 while nothing has finished: a lower bound).
  const int releases = queued_requests + 1 - load.free_slots;
  if (releases > 0 && !load.slot_release_ms.empty()) {
    const int running = static_cast<int>(load.slot_release_ms.size());
    const int round = (releases - 1) / running;
    const double release = load.slot_release_ms[static_cast<size_t>((releases - 1) % running)];
    wait = std::max(wait, release + round * load.hold_ms);
  }
  return wait;
}

}  // namespace brisk
