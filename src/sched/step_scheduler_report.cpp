// What the engine thread tells the other threads about the scheduler after a step: the load for
// submit()'s admission estimate, the counts for stats(), and the picture for GET
// /debug/scheduler (SchedulerReport). Reads the scheduler's state only.
#include <algorithm>

#include "sched/step_scheduler.h"

namespace brisk {

void StepScheduler::report() {
  if (!report_) return;
  SchedulerReport out;
  out.running = static_cast<int>(running_.size());
  out.preempted = static_cast<int>(preempted_.size());
  out.waiting = static_cast<int>(waiting_.size());
  out.waiting_prompt_tokens = queued_prompt_tokens_;
  out.prefix_cache_cells = kv_.cached_cells();
  out.kv_running_cells = kv_.used_cells() - out.prefix_cache_cells;
  out.prefix_cache_sequences = kv_.cached_sequences();
  out.load = estimate_load();
  out.snapshot = describe();
  report_(std::move(out));
}

// For submit()'s estimate: the learned costs, the prompt work the started requests still need,
// and when each running request should give its sequence back.
LoadEstimate StepScheduler::estimate_load() const {
  LoadEstimate load;
  load.decode_step_ms = costs_.decode_step_ms();
  load.prefill_ms_per_token = costs_.prefill_ms_per_token();
  load.loaded_step_ms = loaded_step_ms();
  load.costs = costs_;
  load.max_seqs = options_.max_seqs;
  load.cell_capacity = kv_capacity_tokens_;
  load.cells_per_sequence = !kv_shared_;
  // A newcomer's prompt runs beside the other sequences' decodes.
  load.loaded_prefill_ms_per_token = costs_.prompt_ms_per_token_beside(options_.max_seqs - 1);
  load.free_slots = options_.max_seqs - static_cast<int>(running_.size());
  load.hold_ms = costs_.mean_hold_ms();
  for (const auto& sequence : running_) {
    load.backlog_tokens += sequence->prompt_remaining();
    if (sequence->prefill_done()) ++load.decoders;
    if (load.hold_ms > 0) {
      // Expected to hold it about as many steps as finished requests did, not until its
      // max_tokens (everything left of the context when a client sends none), at the recent
      // step time; one past that is due now.
      load.slot_release_ms.push_back(
          costs_.hold_left_ms(static_cast<double>(steps_run_ - sequence->scheduled_step())));
    } else if (const double left_ms = expected_ms_to_finish(*sequence); left_ms >= 0) {
      // Nothing has finished yet (a cold start under load): a request that named its
      // max_tokens runs them at the measured step costs, and the requests behind it are taken
      // to hold theirs as long (a cold burst's requests look alike).
      load.slot_release_ms.push_back(left_ms);
      const Request& request = sequence->request_ref();
      load.hold_prior_ms = std::max(
          load.hold_prior_ms,
          expected_hold_ms(load,
                           static_cast<int>(request.prompt_tokens.size()) -
                               sequence->cached_prompt_tokens(),
                           request.max_tokens));
    } else {
      ++load.unknown_releases;  // named no max_tokens: not guessed at
    }
  }
  std::sort(load.slot_release_ms.begin(), load.slot_release_ms.end());
  for (const auto& sequence : preempted_) load.backlog_tokens += sequence->prompt_remaining();
  return load;
}

// Milliseconds until a running request that named its max_tokens would have them all, at the
// measured step costs (ignoring a stop or end of generation, which only come sooner); -1 when
// it named none or the decode cost has not settled (a first slow step, priced into hundreds
// of tokens, refused requests that would have waited seconds).
double StepScheduler::expected_ms_to_finish(const Sequence& sequence) const {
  if (!sequence.request_ref().max_tokens_named || !costs_.decode_cost_settled()) return -1;
  const int tokens_left =
      std::max(0, sequence.request_ref().max_tokens - sequence.completion_tokens());
  return sequence.prompt_remaining() * std::max(0.0, costs_.prefill_ms_per_token()) +
         tokens_left * loaded_step_ms();
}

// LoadEstimate::loaded_step_ms.
double StepScheduler::loaded_step_ms() const {
  return brisk::loaded_step_ms(costs_, options_.max_seqs);
}

// The engine thread's part of a snapshot: the running and preempted sequences and the KV map.
SchedulerSnapshot StepScheduler::describe() const {
  SchedulerSnapshot out;
  out.policy = scheduling_policy_name(policy_.policy());
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
  for (const auto& sequence : running_) out.running.push_back(view(*sequence));
  for (const auto& sequence : preempted_) {
    out.preempted.push_back(view(*sequence));
    out.preempted.back().waiting_reason = wait_reason(sequence->request_ref(), true);
  }
  out.waiting_total = static_cast<int>(waiting_.size());
  for (const auto& request : waiting_) {
    if (static_cast<int>(out.waiting.size()) >= SchedulerSnapshot::kMaxWaitingShown) break;
    out.waiting.push_back({request->id, request->priority,
                           static_cast<int>(request->prompt_tokens.size()), request->arrival,
                           request->deadline_ms, wait_reason(*request, false)});
  }
  out.kv.prefix_cache = kv_.cache_enabled();
  out.kv.capacity_cells = kv_capacity_tokens_;
  out.kv.used_cells = kv_.used_cells();
  out.kv.cached_cells = kv_.cached_cells();
  out.kv.running_cells = out.kv.used_cells - out.kv.cached_cells;
  out.kv.committed_cells = out.kv.running_cells;
  for (const auto& sequence : running_) out.kv.committed_cells += sequence->prompt_remaining();
  out.kv.watermark_cells = kv_watermark_tokens_;
  out.kv.sequence_ids = engine_.sequence_ids();
  out.kv.cached_sequences = kv_.cached_sequences();
  return out;
}

// What holds this waiting (or preempted) request back, from the last admission pass.
WaitReason StepScheduler::wait_reason(const Request& request, bool preempted) const {
  if (!preempted && waits_for_first_choice(request)) return WaitReason::first_choice_prefill;
  const auto& after = last_pass_.preempted_after;
  if (std::find(after.begin(), after.end(), &request) != after.end()) {
    return WaitReason::kv_cache_full;  // preempted for room after the pass
  }
  const bool long_turn = !preempted && last_pass_.long_prompts_wait &&
                         is_long_prompt(static_cast<int>(request.prompt_tokens.size()));
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
