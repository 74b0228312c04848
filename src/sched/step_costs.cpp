#include "sched/step_costs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

namespace brisk {

namespace {

double blend(double average, double sample, double weight) {
  return average <= 0 ? sample : (1 - weight) * average + weight * sample;
}

}  // namespace

StepCosts StepCosts::from_table(const StepCostTable& table, double target_step_ms,
                                int max_batched_tokens) {
  StepCosts costs(target_step_ms, max_batched_tokens);
  for (const auto& [batch, ms] : table.decode_ms_by_batch) {
    if (batch > 0 && ms > 0) costs.decode_ms_by_batch_[batch] = ms;
  }
  if (!costs.decode_ms_by_batch_.empty()) costs.last_decode_batch_ = costs.decode_ms_by_batch_.rbegin()->first;
  costs.prefill_ms_per_token_ = std::max(0.0, table.prefill_ms_per_token);
  costs.row_cell_ms_ = std::max(0.0, table.row_cell_ms);
  costs.mark_settled();
  return costs;
}

StepCostTable StepCosts::table() const {
  return {decode_ms_by_batch_, prefill_ms_per_token_, row_cell_ms_};
}

void StepCosts::learn_step(int decode_tokens, int prefill_tokens, double step_ms) {
  constexpr double kWeight = 0.2;
  constexpr double kRecentWeight = 0.05;
  recent_step_ms_ = blend(recent_step_ms_, step_ms, kRecentWeight);
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
    prefill_ms_per_token_ = blend(prefill_ms_per_token_,
                                  std::max(0.0, base_ms - decode_part) / prefill_tokens, kWeight);
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

void StepCosts::learn_hold(double held_steps) {
  constexpr double kWeight = 0.1;
  mean_hold_steps_ = blend(mean_hold_steps_, std::max(1.0, held_steps), kWeight);
}

int StepCosts::chunk_floor(int decode_tokens) const {
  return std::max(kMinChunkTokens, min_prefill_step_tokens_ - decode_tokens);
}

int StepCosts::prefill_budget(int decode_tokens) const {
  return prefill_budget(decode_tokens, prefill_ms_per_token());
}

int StepCosts::prefill_budget(int decode_tokens, double ms_per_token) const {
  const int token_budget = max_batched_tokens_ - decode_tokens;
  if (target_step_ms_ <= 0 || decode_tokens == 0 || ms_per_token <= 0) return token_budget;
  const double spare_ms = target_step_ms_ - decode_step_ms(decode_tokens);
  const int timed_budget = static_cast<int>(spare_ms / ms_per_token);
  return std::min(token_budget, std::max(chunk_floor(decode_tokens), timed_budget));
}

double StepCosts::prompt_ms_per_token_beside(int decode_tokens) const {
  const double per_token = prefill_ms_per_token();
  if (per_token <= 0 || decode_tokens <= 0) return per_token;
  const int chunk = std::max(1, prefill_budget(decode_tokens, per_token));
  return step_ms(decode_tokens, chunk) / chunk;
}

int StepCosts::long_chunk_budget(int decode_tokens) const {
  if (decode_tokens > 0) return prefill_budget(decode_tokens);
  // Until a decode step is measured, a step's fixed cost is unknown and would be charged to
  // the chunk's tokens: keep the whole budget.
  const double fixed_ms = decode_step_ms(1);
  const double per_token = prefill_ms_per_token();
  if (target_step_ms_ <= 0 || per_token <= 0 || fixed_ms <= 0) return max_batched_tokens_;
  const int timed_budget = static_cast<int>((target_step_ms_ - fixed_ms) / per_token);
  const int floor =
      std::max({chunk_floor(0), min_alone_chunk_tokens_,
                static_cast<int>(std::ceil(kMinAloneChunkOverFixedCost * fixed_ms / per_token))});
  return std::min(max_batched_tokens_, std::max(floor, timed_budget));
}

double estimate_queue_delay_ms(const LoadEstimate& load, int queued_tokens, int queued_requests,
                               int max_batched_tokens, double own_hold_ms) {
  // Prompt work ahead, in steps shared with the running decodes (once a prompt token's cost
  // is measured).
  const int tokens_ahead = queued_tokens + load.backlog_tokens;
  double wait = tokens_ahead * load.prefill_ms_per_token;
  if (load.prefill_ms_per_token > 0 && load.decoders > 0 && tokens_ahead > 0) {
    const int per_step = std::max(1, max_batched_tokens - load.decoders);
    wait += std::ceil(static_cast<double>(tokens_ahead) / per_step) * load.decode_step_ms;
  }
  // No sequence free for it: the requests ahead take the sequences as they come free (the free
  // ones at once, the running ones' when they give them back) and each holds its one for a
  // hold; this request takes the one that comes free after theirs. A prompt starts once it has
  // a sequence and the prompts started before it are in: beside running decodes they share
  // each step's time left under the target, one after another (a burst's second round of 16
  // waited 19 s for sequences, then 0-23 s for the prompts ahead of it).
  const int position = queued_requests + 1;
  if (position <= load.free_slots) return wait;
  const double hold = load.hold_ms > 0 ? load.hold_ms : std::max(load.hold_prior_ms, own_hold_ms);
  const double prompt_ms = static_cast<double>(queued_tokens) / std::max(1, queued_requests) *
                           load.loaded_prefill_ms_per_token;
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at(
      load.slot_release_ms.begin(), load.slot_release_ms.end());
  for (int i = 0; i < load.free_slots; ++i) free_at.push(0);
  for (int i = 0; i < load.unknown_releases; ++i) free_at.push(hold);
  if (free_at.empty()) return wait;
  double prompts_in = load.backlog_tokens * load.loaded_prefill_ms_per_token;
  for (int ahead = 1; ahead < position; ++ahead) {
    const double started = std::max(free_at.top(), prompts_in);
    free_at.pop();
    prompts_in = started + prompt_ms;
    free_at.push(started + hold);
  }
  return std::max(wait, std::max(free_at.top(), prompts_in));
}

double loaded_step_ms(const StepCosts& costs, int max_seqs) {
  const double decodes = costs.decode_step_ms(max_seqs);
  return max_seqs > 1 ? std::max(decodes, costs.target_step_ms()) : decodes;
}

LoadEstimate priced_for_requests_like(const LoadEstimate& load, int requests, int prompt_tokens,
                                      int max_tokens) {
  if (load.costs.row_cell_ms() <= 0 || load.max_seqs <= 0) return load;
  const int per_request = (std::max(0, prompt_tokens) + std::max(0, max_tokens)) / 2;
  const int now = load.costs.attended_cells();
  const int cells =
      load.cells_per_sequence
          ? std::max(now, per_request)
          : std::min(load.cell_capacity,
                     now + per_request * std::clamp(requests, 1, load.max_seqs));
  if (cells <= now) return load;
  LoadEstimate out = load;
  out.costs = load.costs.at_attended_cells(cells);
  out.decode_step_ms = out.costs.decode_step_ms();
  out.prefill_ms_per_token = out.costs.prefill_ms_per_token();
  out.loaded_step_ms = loaded_step_ms(out.costs, load.max_seqs);
  out.loaded_prefill_ms_per_token = out.costs.prompt_ms_per_token_beside(load.max_seqs - 1);
  return out;
}

double expected_hold_ms(const LoadEstimate& load, int prompt_tokens, int max_tokens) {
  if (max_tokens <= 0) return 0;
  return std::max(0, prompt_tokens) * load.loaded_prefill_ms_per_token +
         max_tokens * load.loaded_step_ms;
}

}  // namespace brisk
