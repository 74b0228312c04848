#include "sched/wait_forecast.h"

#include <algorithm>

#include "sched/serve_simulation.h"

namespace brisk {

namespace {

// Running requests were admitted before anything waiting: far enough back that no policy
// (arrival order, aged priority, earliest deadline) puts a waiting one before them.
constexpr double kRunningArrivalMs = -1e9;

}  // namespace

ForecastRequest queued_forecast_request(const Request& request, double mean_output_tokens,
                                        TimePoint now) {
  ForecastRequest out;
  out.prompt_tokens = queued_prefill_tokens(request);
  out.output_tokens = request.max_tokens_named ? request.max_tokens
                      : mean_output_tokens > 0 ? static_cast<int>(mean_output_tokens + 0.5)
                                               : 0;
  out.priority = request.priority;
  out.waited_ms = ms_between(request.arrival, now);
  return out;
}

double forecast_wait_ms(const WaitForecastOptions& options, const LiveLoad& load,
                        const std::vector<ForecastRequest>& submitted, const Newcomer& newcomer,
                        double horizon_ms) {
  if (!load.costs_settled || load.costs.empty()) return 0;
  ServeSimulationOptions simulated;
  simulated.scheduler = options.scheduler;
  simulated.kv_cells = options.kv_cells;
  simulated.buffer_per_sequence = options.buffer_per_sequence;
  simulated.price = load.costs;
  simulated.warm_up = false;
  simulated.starts_knowing_price = true;
  ServeSimulation simulation(simulated);

  const int unknown_output = newcomer.max_tokens > 0 ? newcomer.max_tokens : 1;
  const auto add = [&](const ForecastRequest& request, double arrival_ms) {
    SimulatedRequest one;
    one.arrival_ms = arrival_ms;
    one.prompt_tokens = std::max(1, request.prompt_tokens);
    one.output_tokens = request.output_tokens > 0 ? request.output_tokens : unknown_output;
    one.priority = request.priority;
    one.held_cells = request.held_cells;
    simulation.arrive(one);
  };
  for (const ForecastRequest& request : load.running) add(request, kRunningArrivalMs);
  for (const ForecastRequest& request : load.preempted) add(request, -request.waited_ms);
  for (const ForecastRequest& request : load.waiting) add(request, -request.waited_ms);
  for (const ForecastRequest& request : submitted) add(request, -request.waited_ms);
  const size_t ahead = simulation.requests().size();
  ForecastRequest own;
  own.prompt_tokens = newcomer.prompt_tokens;
  own.output_tokens = newcomer.max_tokens;
  own.priority = newcomer.priority;
  for (int i = 0; i < std::max(1, newcomer.count); ++i) add(own, 0);

  // What its prompt costs alone, at no other request's cells: not a wait.
  const double own_ms =
      StepCosts::from_table(load.costs, options.scheduler.max_step_ms,
                            options.scheduler.max_batched_tokens)
          .step_ms(0, std::max(1, newcomer.prompt_tokens));
  const auto& requests = simulation.requests();
  const auto served = [&] { return requests.back().first_token_ms >= 0; };
  if (simulation.run_until(served, horizon_ms + own_ms)) {
    return std::max(0.0, requests.back().first_token_ms - own_ms);
  }
  // Not served by the horizon: the requests that were waiting were served at some rate since
  // the start (the running ones at once); the newcomer is as many places further as are left.
  const auto running = static_cast<std::ptrdiff_t>(load.running.size());
  std::ptrdiff_t served_since = 0;
  double last_served_ms = 0;
  for (std::ptrdiff_t i = running; i < static_cast<std::ptrdiff_t>(ahead); ++i) {
    const double at = requests[static_cast<size_t>(i)].first_token_ms;
    if (at < 0) continue;
    ++served_since;
    last_served_ms = std::max(last_served_ms, at);
  }
  const double places = static_cast<double>(static_cast<std::ptrdiff_t>(ahead) - running + 1);
  const double served_ms = served_since > 0 ? last_served_ms * places / served_since
                                            : simulation.now_ms() * places;
  // The clock stopped past the horizon: the wait is longer than it, whatever the rate says.
  return std::max(simulation.now_ms(), served_ms) - own_ms;
}

}  // namespace brisk
