// What the engine thread tells the other threads about the scheduler after a step: the load for
// submit()'s admission forecast, the counts for stats(), and the picture for GET
// /debug/scheduler (SchedulerReport). Reads the scheduler's state only.
#include <algorithm>

#include "sched/step_scheduler.h"
#include "sched/wait_forecast.h"

namespace brisk {

void StepScheduler::report() {
  if (!report_) return;
  SchedulerReport out;
  out.running = static_cast<int>(state_.running.size());
  out.preempted = static_cast<int>(state_.preempted.size());
  out.waiting = static_cast<int>(state_.waiting.size());
  out.waiting_prompt_tokens = state_.queued_prompt_tokens;
  out.prefix_cache_cells = kv_.cached_cells();
  out.kv_running_cells = kv_.used_cells() - out.prefix_cache_cells;
  out.prefix_cache_sequences = kv_.cached_sequences();
  out.load = live_load();
  out.snapshot = describe();
  report_(std::move(out));
}

// For submit()'s forecast (sched/wait_forecast.h): the learned costs and every request held,
// with what it still has to compute and generate.
LiveLoad StepScheduler::live_load() const {
  LiveLoad load;
  load.costs = costs_.table();
  // A first slow step (buffers faulted in) weighs little once enough steps are measured, or
  // once requests ran to their end.
  load.costs_settled = costs_.decode_cost_settled() || mean_output_tokens_ > 0;
  load.free_slots = options_.max_seqs - static_cast<int>(state_.running.size());
  load.mean_output_tokens = mean_output_tokens_;
  const TimePoint now = this->now();
  const auto output_left = [&](const Request& request, int generated) {
    if (request.max_tokens_named) return std::max(1, request.max_tokens - generated);
    if (mean_output_tokens_ <= 0) return 0;  // unknown
    return std::max(1, static_cast<int>(mean_output_tokens_ + 0.5) - generated);
  };
  const auto of_sequence = [&](const Sequence& sequence) {
    const Request& request = sequence.request_ref();
    ForecastRequest out;
    out.prompt_tokens = sequence.prompt_remaining();
    out.held_cells = sequence.kv_tokens();
    out.output_tokens = output_left(request, sequence.completion_tokens());
    out.priority = request.priority;
    out.waited_ms = ms_between(request.arrival, now);
    out.served = sequence.completion_tokens() > 0;
    return out;
  };
  for (const auto& sequence : state_.running) load.running.push_back(of_sequence(*sequence));
  for (const auto& sequence : state_.preempted) {
    load.preempted.push_back(of_sequence(*sequence));
    load.preempted.back().held_cells = 0;  // it recomputes them
  }
  for (const auto& request : state_.waiting) {
    load.waiting.push_back(queued_forecast_request(*request, mean_output_tokens_, now));
  }
  return load;
}

// The engine thread's part of a snapshot: the running and preempted sequences and the KV map.
SchedulerSnapshot StepScheduler::describe() const {
  SchedulerSnapshot out;
  out.policy = scheduling_policy_name(planner_.policy().policy());
  out.max_seqs = options_.max_seqs;
  out.max_batched_tokens = options_.max_batched_tokens;
  out.target_itl_ms = options_.max_step_ms;
  out.decode_step_ms = costs_.decode_step_ms();
  out.step_costs = costs_.table();
  out.min_alone_chunk_tokens = options_.min_alone_chunk_tokens;
  out.prefill_ms_per_token = costs_.prefill_ms_per_token();
  out.admission_blocked = last_pass_.blocked;
  const auto view = [](const Sequence& sequence) {
    SequenceView v;
    const Request& request = sequence.request_ref();
    v.id = request.id;
    v.priority = request.priority;
    v.prompt_tokens = static_cast<int>(request.prompt_tokens.size());
    v.cached_prompt_tokens = sequence.cached_prompt_tokens();
    v.prefill_remaining = sequence.prompt_remaining();
    v.kv_tokens = sequence.kv_tokens();
    v.generated_tokens = sequence.completion_tokens();
    v.max_tokens = request.max_tokens;
    v.scheduled_at = sequence.scheduled_at();
    return v;
  };
  for (const auto& sequence : state_.running) out.running.push_back(view(*sequence));
  for (const auto& sequence : state_.preempted) {
    out.preempted.push_back(view(*sequence));
    out.preempted.back().waiting_reason = wait_reason(sequence->request_ref(), true);
  }
  out.waiting_total = static_cast<int>(state_.waiting.size());
  for (const auto& request : state_.waiting) {
    if (static_cast<int>(out.waiting.size()) >= SchedulerSnapshot::kMaxWaitingShown) break;
    out.waiting.push_back({request->id, request->priority,
                           static_cast<int>(request->prompt_tokens.size()), request->arrival,
                           request->deadline_ms, wait_reason(*request, false)});
  }
  out.kv.prefix_cache = kv_.cache_enabled();
  out.kv.capacity_cells = planner_.kv_shape().capacity_cells;
  out.kv.used_cells = kv_.used_cells();
  out.kv.cached_cells = kv_.cached_cells();
  out.kv.running_cells = out.kv.used_cells - out.kv.cached_cells;
  out.kv.committed_cells = out.kv.running_cells;
  for (const auto& sequence : state_.running) out.kv.committed_cells += sequence->prompt_remaining();
  out.kv.watermark_cells = planner_.kv_shape().watermark_cells;
  out.kv.sequence_ids = engine_.sequence_ids();
  out.kv.cached_sequences = kv_.cached_sequences();
  return out;
}

// What holds this waiting (or preempted) request back, from the last admission pass.
WaitReason StepScheduler::wait_reason(const Request& request, bool preempted) const {
  if (!preempted && StepPlanner::waits_for_first_choice(request, kv_.cache_enabled())) return WaitReason::first_choice_prefill;
  const auto& after = last_pass_.preempted_after;
  if (std::find(after.begin(), after.end(), &request) != after.end()) {
    return WaitReason::kv_cache_full;  // preempted for room after the pass
  }
  const bool long_turn = !preempted && last_pass_.long_prompts_wait &&
                         planner_.is_long_prompt(static_cast<int>(request.prompt_tokens.size()));
  switch (last_pass_.blocked) {
    case AdmissionBlock::no_free_sequence:
      return WaitReason::no_free_sequence;
    case AdmissionBlock::step_budget:
      return WaitReason::step_budget;
    case AdmissionBlock::long_prefill_turn:
      return WaitReason::long_prefill_turn;
    case AdmissionBlock::first_choice_prefill:
      return WaitReason::first_choice_prefill;  // every request waiting is a later choice
    case AdmissionBlock::kv_cache_full:
      if (&request == last_pass_.stopped_at) return WaitReason::kv_cache_full;
      return long_turn ? WaitReason::long_prefill_turn : WaitReason::behind_others;
    case AdmissionBlock::none:
      break;
  }
  return WaitReason::not_yet_considered;  // the pass admitted all it saw
}

}  // namespace brisk
