#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "sched/priced_model_runner.h"
#include "sched/serving_metrics.h"
#include "sched/step_costs.h"
#include "sched/step_scheduler.h"

namespace brisk {

// One request of a simulated load, and (once run) what happened to it.
struct SimulatedRequest {
  double arrival_ms = 0;
  int prompt_tokens = 1;
  // Of prompt_tokens, the first ones every request shares (a system prompt): the prefix cache
  // serves them once they were computed.
  int shared_prefix_tokens = 0;
  int output_tokens = 1;
  int priority = 0;  // as a request's (--policy priority)
  // KV cells it held before the simulation began (a request a live server is running): every
  // row attends over them until it ends (PricedModelRunner::set_cells_outside).
  int held_cells = 0;
  int user = 0;           // for the caller: a closed loop's user
  bool measured = true;   // for the caller: counted in its statistics
  // Filled in by the run.
  double first_token_ms = -1;
  double end_ms = -1;
  int cached_prompt_tokens = 0;
  FinishReason finish_reason = FinishReason::none;
};

struct ServeSimulationOptions {
  // As brisk serve runs them (its flags); the clock is the simulation's own.
  SchedulerOptions scheduler;
  int kv_cells = 8192;  // --ctx-size
  bool buffer_per_sequence = false;  // --no-kv-unified
  // What a step of each shape costs on the device simulated (sched/step_costs.h).
  StepCostTable price;
  // Before the first request the scheduler measures its steps, as brisk serve's --warmup does.
  bool warm_up = true;
  // Without the warm-up: the scheduler starts knowing `price` as its learned costs, as a
  // server that has been running knows them (admission's forecast from the live state).
  bool starts_knowing_price = false;
};

// brisk serve's StepScheduler, the very code that schedules the server, run on a model runner
// whose steps take the time `price` says (PricedModelRunner) on a virtual clock: arrivals are
// handed to it between steps, as the engine loop hands them over, and each request's first
// token and end are read from its updates. brisk plan predicts with it, so the planner cannot
// drift from the server: a change to the scheduler changes both.
class ServeSimulation {
 public:
  explicit ServeSimulation(const ServeSimulationOptions& options);
  ServeSimulation(const ServeSimulation&) = delete;
  ServeSimulation& operator=(const ServeSimulation&) = delete;

  // A request arrives at request.arrival_ms (no earlier than the last one given); may be called
  // from run()'s on_end. Returns its index in requests().
  size_t arrive(SimulatedRequest request);
  // Runs until every request given has ended. `on_end(index)` runs as each one ends.
  // False when the scheduler stopped making progress with requests left (they stay unended).
  bool run(const std::function<void(size_t)>& on_end = nullptr);
  // Runs until `done()` holds (checked after each step) or the clock passes `until_ms`, or
  // nothing is left to run; returns done().
  bool run_until(const std::function<bool()>& done, double until_ms);

  const std::vector<SimulatedRequest>& requests() const { return requests_; }
  // Every step the scheduler ran for the requests (the warm-up's not among them).
  const std::vector<PricedStep>& steps() const { return runner_.steps(); }
  double now_ms() const { return elapsed_ms(); }

 private:
  double elapsed_ms() const { return ms_between(origin_, clock_.now()); }
  void hand_over_arrivals();
  bool run_steps(const std::function<void(size_t)>& on_end, const std::function<bool()>& done,
                 double until_ms);
  std::shared_ptr<Request> make_request(size_t index);

  ServeSimulationOptions options_;
  VirtualClock clock_;
  TimePoint origin_;
  PricedModelRunner runner_;
  ServingMetrics metrics_;
  StepScheduler scheduler_;
  std::vector<SimulatedRequest> requests_;
  std::deque<size_t> future_;  // not yet handed over, in arrival order
  std::vector<size_t> ended_;  // ended during the current step, for on_end
  int cells_outside_ = 0;      // the held_cells of requests not ended yet
};

}  // namespace brisk
