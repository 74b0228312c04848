#include "server/scheduler_json.h"

#include <cmath>

#include "sched/step_cost_table_json.h"

namespace brisk {
namespace {

double round_ms(double ms) { return std::round(ms * 1000.0) / 1000.0; }

nlohmann::json sequence_json(const SequenceView& sequence, TimePoint now) {
  return {{"id", sequence.id},
          {"priority", sequence.priority},
          {"prompt_tokens", sequence.prompt_tokens},
          {"cached_prompt_tokens", sequence.cached_prompt_tokens},
          {"prefill_remaining_tokens", sequence.prefill_remaining},
          {"phase", sequence.prefill_remaining > 0 ? "prefill" : "decode"},
          {"kv_cells", sequence.kv_tokens},
          {"generated_tokens", sequence.generated_tokens},
          {"max_tokens", sequence.max_tokens},
          {"running_ms", round_ms(ms_between(sequence.scheduled_at, now))}};
}

}  // namespace

nlohmann::json scheduler_json(const SchedulerSnapshot& snapshot) {
  const TimePoint now = snapshot.taken_at;
  nlohmann::json running = nlohmann::json::array();
  for (const auto& sequence : snapshot.running) running.push_back(sequence_json(sequence, now));
  nlohmann::json preempted = nlohmann::json::array();
  for (const auto& sequence : snapshot.preempted) {
    nlohmann::json view = sequence_json(sequence, now);
    view["waiting_reason"] = wait_reason_name(sequence.waiting_reason);
    preempted.push_back(std::move(view));
  }
  nlohmann::json waiting = nlohmann::json::array();
  for (const auto& request : snapshot.waiting) {
    waiting.push_back({{"id", request.id},
                       {"priority", request.priority},
                       {"prompt_tokens", request.prompt_tokens},
                       {"waited_ms", round_ms(request.waited_ms)},
                       {"deadline_ms", request.deadline_ms},
                       {"waiting_reason", wait_reason_name(request.reason)}});
  }
  const auto& kv = snapshot.kv;
  return {
      {"policy", snapshot.policy},
      {"limits",
       {{"max_seqs", snapshot.max_seqs},
        {"max_batched_tokens", snapshot.max_batched_tokens},
        {"target_itl_ms", snapshot.target_itl_ms},
        {"min_alone_chunk_tokens", snapshot.min_alone_chunk_tokens}}},
      {"measured",
       {{"decode_step_ms", round_ms(snapshot.decode_step_ms)},
        {"prefill_ms_per_token", round_ms(snapshot.prefill_ms_per_token)},
        {"step_costs", step_cost_table_json(snapshot.step_costs)}}},
      {"admission_blocked", admission_block_name(snapshot.admission_blocked)},
      {"running", running},
      {"preempted", preempted},
      {"waiting", waiting},
      {"waiting_total", snapshot.waiting_total},
      {"kv",
       {{"prefix_cache", kv.prefix_cache},
        {"capacity_cells", kv.capacity_cells},
        {"used_cells", kv.used_cells},
        {"running_cells", kv.running_cells},
        {"cached_cells", kv.cached_cells},
        {"committed_cells", kv.committed_cells},
        {"watermark_cells", kv.watermark_cells},
        {"sequence_ids", kv.sequence_ids},
        {"cached_sequences", kv.cached_sequences}}}};
}

}  // namespace brisk
