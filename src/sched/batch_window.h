#pragma once

#include <optional>
#include <span>
#include <vector>

#include "common/clock.h"

namespace brisk {

// The dynamic batcher's knobs (docs/cli.md, "Embeddings"), after Triton's dynamic batcher:
// requests that arrive within `window_ms` of the oldest waiting one are computed together.
struct BatchWindowOptions {
  double window_ms = 0;  // --batch-window-ms
  // --preferred-batch-sizes (inputs): a batch of one of these sizes runs without waiting for
  // the window; the largest one the queue can fill is taken.
  std::vector<int> preferred_batch_sizes;
  int max_queued_inputs = 8192;  // --max-queued-inputs: more waiting inputs answer 429
};

// What the planner sees of one waiting input, in queue order (priority, then arrival).
struct WaitingInput {
  int tokens = 0;
  TimePoint arrival;
};

// Why a batch runs now.
enum class BatchTrigger { full, preferred_size, window };

// The planner's answer: run the first `inputs` waiting inputs now, or sleep until `wake_at`
// (or a new arrival).
struct BatchDecision {
  int inputs = 0;
  BatchTrigger trigger = BatchTrigger::window;
  std::optional<TimePoint> wake_at;  // only when inputs == 0 and something waits
};

// Turns the queue into the next batch without acting on it. A batch is the longest prefix of
// the queue within `max_tokens` and `max_inputs`; it runs when it is full (the next input does
// not fit), when it reaches a preferred size, or when the oldest waiting input has waited the
// window. Inputs run in queue order: a long input is never overtaken by later short ones.
BatchDecision plan_batch(std::span<const WaitingInput> queue, TimePoint now, int max_tokens,
                         int max_inputs, const BatchWindowOptions& options);

}  // namespace brisk
