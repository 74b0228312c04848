#include "sched/step_costs.h"

#include <algorithm>
#include <cmath>

namespace brisk {

namespace {

double blend(double average, double sample, double weight) {
  return average <= 0 ? sample : (1 - weight) * average + weight * sample;
}

}  // namespace

StepCosts StepCosts::from_table(const StepCostTable& table, double target_step_ms,
                                int max_batched_tokens) {
  StepCosts costs(target_step_ms, max_batched_tokens);
  costs.adopt(table);
  return costs;
}

void StepCosts::adopt(const StepCostTable& table) {
  decode_ms_by_batch_.clear();
  for (const auto& [batch, ms] : table.decode_ms_by_batch) {
    if (batch > 0 && ms > 0) decode_ms_by_batch_[batch] = ms;
  }
  if (!decode_ms_by_batch_.empty()) last_decode_batch_ = decode_ms_by_batch_.rbegin()->first;
  prefill_ms_per_token_ = std::max(0.0, table.prefill_ms_per_token);
  small_chunk_prefill_ms_per_token_ = std::max(0.0, table.small_chunk_prefill_ms_per_token);
  row_cell_ms_ = std::max(0.0, table.row_cell_ms);
  mark_settled();
}

StepCostTable StepCosts::table() const {
  return {decode_ms_by_batch_, prefill_ms_per_token_, small_chunk_prefill_ms_per_token_,
          row_cell_ms_};
}

void StepCosts::learn_step(int decode_tokens, int prefill_tokens, double step_ms) {
  constexpr double kWeight = 0.2;
  // Kept as at no attended cell: what the rows paid for the cells is priced at each use.
  const double base_ms = std::max(0.0, step_ms - cell_ms(decode_tokens + prefill_tokens));
  if (prefill_tokens == 0) {
    if (decode_tokens <= 0) return;
    double& average = decode_ms_by_batch_[decode_tokens];
    average = blend(average, base_ms, kWeight);
    last_decode_batch_ = decode_tokens;
    ++decode_steps_measured_;
  } else if (prefill_tokens >= kMinChunkTokens) {
    // A few prompt tokens say more about the step's fixed cost than about a token's. The
    // decodes' part is their own batch's: priced at another batch's (the last one measured,
    // while prompts kept every step busy), it was charged to the prompt tokens.
    // A step of prompt tokens alone still pays what any step costs: a one-token step's time
    // (0 until one was measured). Charged to its tokens, it made small chunks look dear, and
    // chunks cut to the target shrank towards the floor (a 2,900-token prompt took 67 s, not 7).
    const double decode_part = base_decode_step_ms(std::max(1, decode_tokens));
    double& price = prefill_tokens < kTiledChunkTokens ? small_chunk_prefill_ms_per_token_
                                                       : prefill_ms_per_token_;
    price = blend(price, std::max(0.0, base_ms - decode_part) / prefill_tokens, kWeight);
  }
}

double StepCosts::decode_step_ms(int batch) const {
  const double base = base_decode_step_ms(batch);
  return base <= 0 ? 0 : base + cell_ms(batch);
}

double StepCosts::base_decode_step_ms(int batch) const {
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

int StepCosts::chunk_floor(int decode_tokens) const {
  return std::max(kMinChunkTokens, min_prefill_step_tokens_ - decode_tokens);
}

int StepCosts::prefill_budget(int decode_tokens) const {
  const int token_budget = max_batched_tokens_ - decode_tokens;
  if (target_step_ms_ <= 0 || decode_tokens == 0 || prefill_ms_per_token() <= 0) {
    return token_budget;
  }
  const int timed_budget = timed_chunk_tokens(target_step_ms_ - decode_step_ms(decode_tokens));
  return std::min(token_budget, std::max(chunk_floor(decode_tokens), timed_budget));
}

int StepCosts::timed_chunk_tokens(double spare_ms) const {
  const int tiled = static_cast<int>(spare_ms / prefill_ms_per_token());
  if (tiled >= kTiledChunkTokens) return tiled;
  return std::min(tiled, static_cast<int>(spare_ms / prompt_token_ms(1)));
}

int StepCosts::long_chunk_budget(int decode_tokens) const {
  if (decode_tokens > 0) return prefill_budget(decode_tokens);
  // Until a decode step is measured, a step's fixed cost is unknown and would be charged to
  // the chunk's tokens: keep the whole budget.
  const double fixed_ms = decode_step_ms(1);
  const double per_token = prefill_ms_per_token();
  if (target_step_ms_ <= 0 || per_token <= 0 || fixed_ms <= 0) return max_batched_tokens_;
  const int timed_budget = timed_chunk_tokens(target_step_ms_ - fixed_ms);
  const int floor =
      std::max({chunk_floor(0), min_alone_chunk_tokens_,
                static_cast<int>(std::ceil(kMinAloneChunkOverFixedCost * fixed_ms / per_token))});
  return std::min(max_batched_tokens_, std::max(floor, timed_budget));
}

}  // namespace brisk
