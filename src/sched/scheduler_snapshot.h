#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "sched/step_costs.h"

namespace brisk {

// Why the requests in the queue are not running yet: the reason the last admission pass stopped
// (brisk_requests_waiting_by_reason, GET /debug/scheduler).
enum class AdmissionBlock {
  none,               // nothing waiting, or admitted in the last step
  no_free_sequence,   // --max-seqs requests are running
  kv_cache_full,      // the next prompt does not fit beside the running requests' cells
  long_prefill_turn,  // only long prompts wait, and --max-long-prefills are being prefilled
  step_budget,        // this step's token budget was spent; the next step admits more
  first_choice_prefill,  // only later choices of n > 1 requests wait, for their first choice's
                         // prompt to be in the KV cache
};
const char* admission_block_name(AdmissionBlock block);

// Why one waiting or preempted request is not running (GET /debug/scheduler): the last admission
// pass's block where it holds this request back, with the block's name.
enum class WaitReason {
  no_free_sequence,    // --max-seqs requests are running
  kv_cache_full,       // it is next, and does not fit beside the running requests' cells (or it
                       // was preempted for room after the pass)
  long_prefill_turn,   // a long prompt: --max-long-prefills long prompts are being prefilled
  step_budget,         // the step's token budget was spent
  first_choice_prefill,  // a later choice of an n > 1 request: its first choice is still
                         // prefilling the prompt they share
  behind_others,       // the request before it in the policy's order waits for room, and is not
                       // overtaken
  not_yet_considered,  // submitted after the last step's admission pass
};
const char* wait_reason_name(WaitReason reason);

// One running or preempted request as the engine thread last saw it.
struct SequenceView {
  uint64_t id = 0;
  int priority = 0;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;
  int prefill_remaining = 0;  // prompt (or replay) tokens still to compute
  int kv_tokens = 0;
  int generated_tokens = 0;
  int max_tokens = 0;
  TimePoint scheduled_at;
  WaitReason waiting_reason = WaitReason::not_yet_considered;  // preempted ones only
};

struct WaitingView {
  uint64_t id = 0;
  int priority = 0;
  int prompt_tokens = 0;
  TimePoint arrival;
  double deadline_ms = 0;
  WaitReason reason = WaitReason::not_yet_considered;
  double waited_ms = 0;  // at the moment of the snapshot
};

// What GET /debug/scheduler shows: the queue, the running set and the KV map, published by the
// engine thread after every step (requests submitted since are added at the moment of the call).
struct SchedulerSnapshot {
  TimePoint taken_at;  // the waits and running times are as of this moment
  std::string policy;
  int max_seqs = 0;
  int max_batched_tokens = 0;
  double target_itl_ms = 0;
  double decode_step_ms = 0;        // learned
  double prefill_ms_per_token = 0;  // learned
  // Everything the step costs learned (warm-up and steps run): what `brisk plan calibrate
  // --from-server` stores for the planner's simulation.
  StepCostTable step_costs;
  // ggml-cpu's tiled-attention floor for a lone long chunk (0 where attention runs on a GPU).
  int min_alone_chunk_tokens = 0;
  AdmissionBlock admission_blocked = AdmissionBlock::none;
  std::vector<SequenceView> running;
  std::vector<SequenceView> preempted;
  std::vector<WaitingView> waiting;  // the first kMaxWaitingShown, in arrival order
  int waiting_total = 0;
  struct Kv {
    bool prefix_cache = false;
    int capacity_cells = 0;
    int used_cells = 0;       // held by anyone
    int running_cells = 0;    // held by running requests
    int cached_cells = 0;     // held only by cached prefixes (evictable)
    int committed_cells = 0;  // running cells + the prompt tokens running requests still need
    int watermark_cells = 0;
    int sequence_ids = 0;
    int cached_sequences = 0;
  } kv;

  static constexpr int kMaxWaitingShown = 100;
};

}  // namespace brisk
