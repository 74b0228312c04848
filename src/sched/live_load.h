#pragma once

#include <vector>

#include "sched/step_costs.h"

namespace brisk {

// One request in a live server's hands, as a newcomer's forecast sees it.
struct ForecastRequest {
  int prompt_tokens = 0;  // still to compute (0: its prompt is in, it decodes)
  int held_cells = 0;     // KV cells it holds now
  // Tokens still to generate: what its max_tokens leaves, else what finished requests
  // generated on average (minus what it has); 0: unknown (nothing finished, none named).
  int output_tokens = 0;
  int priority = 0;
  double waited_ms = 0;  // since its arrival
  bool served = false;   // it has had its first token
};

// What the engine thread publishes after each step and admission, for submit()'s forecast: the
// requests it holds, in the order it holds them, and the costs it learned.
struct LiveLoad {
  std::vector<ForecastRequest> running;    // in admission order
  std::vector<ForecastRequest> preempted;  // in the order they resume
  std::vector<ForecastRequest> waiting;    // handed to the scheduler, in arrival order
  StepCostTable costs;
  bool costs_settled = false;  // enough steps measured (or warmed up) to price with
  int free_slots = 0;          // sequences nobody runs
  // What finished requests generated on average (0: none finished yet).
  double mean_output_tokens = 0;
};

}  // namespace brisk
