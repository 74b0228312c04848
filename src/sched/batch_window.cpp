#include "sched/batch_window.h"

#include <algorithm>

namespace brisk {

BatchDecision plan_batch(std::span<const WaitingInput> queue, TimePoint now, int max_tokens,
                         int max_inputs, const BatchWindowOptions& options) {
  BatchDecision decision;
  if (queue.empty()) return decision;
  int inputs = 0;
  int tokens = 0;
  bool full = false;
  for (const WaitingInput& input : queue) {
    if (inputs == max_inputs || tokens + input.tokens > max_tokens) {
      full = true;
      break;
    }
    ++inputs;
    tokens += input.tokens;
  }
  // An input longer than a batch cannot wait for room; the runner refuses it with a message
  // (the server refuses such inputs before they queue).
  if (full) return {std::max(inputs, 1), BatchTrigger::full, std::nullopt};

  int preferred = 0;
  for (int size : options.preferred_batch_sizes) {
    if (size <= inputs) preferred = std::max(preferred, size);
  }
  if (preferred > 0) return {preferred, BatchTrigger::preferred_size, std::nullopt};

  TimePoint oldest = queue.front().arrival;
  for (const WaitingInput& input : queue) oldest = std::min(oldest, input.arrival);
  const TimePoint window_end =
      oldest + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double, std::milli>(options.window_ms));
  if (now >= window_end) return {inputs, BatchTrigger::window, std::nullopt};
  decision.wake_at = window_end;
  return decision;
}

}  // namespace brisk
