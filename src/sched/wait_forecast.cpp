#include "sched/wait_forecast.h"

#include <algorithm>
#include <limits>

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

WaitForecast forecast_waits(const WaitForecastOptions& options, const LiveLoad& load,
                            const std::vector<ForecastRequest>& submitted,
                            const Newcomer& newcomer, double horizon_ms) {
  WaitForecast out;
  if (!load.costs_settled || load.costs.empty()) return out;
  ServeSimulationOptions simulated;
  simulated.scheduler = options.scheduler;
  simulated.kv_cells = options.kv_cells;
  simulated.buffer_per_sequence = options.buffer_per_sequence;
  simulated.price = load.costs;
  simulated.warm_up = false;
  simulated.starts_knowing_price = true;
  ServeSimulation simulation(simulated);
  // A prompt's cost alone, at no other request's cells: not a wait.
  const StepCosts alone = StepCosts::from_table(load.costs, options.scheduler.max_step_ms,
                                                options.scheduler.max_batched_tokens);
  const auto alone_ms = [&](int prompt_tokens) {
    return alone.step_ms(0, std::max(1, prompt_tokens));
  };

  const int unknown_output = newcomer.max_tokens > 0 ? newcomer.max_tokens : 1;
  std::vector<const ForecastRequest*> ahead;
  const auto add = [&](const ForecastRequest& request, double arrival_ms) {
    SimulatedRequest one;
    one.arrival_ms = arrival_ms;
    one.prompt_tokens = std::max(1, request.prompt_tokens);
    one.output_tokens = request.output_tokens > 0 ? request.output_tokens : unknown_output;
    one.priority = request.priority;
    one.held_cells = request.held_cells;
    simulation.arrive(one);
  };
  for (const ForecastRequest& request : load.running) {
    add(request, kRunningArrivalMs);
    ahead.push_back(&request);
  }
  for (const auto* queue : {&load.preempted, &load.waiting, &submitted}) {
    for (const ForecastRequest& request : *queue) {
      add(request, -request.waited_ms);
      ahead.push_back(&request);
    }
  }
  ForecastRequest own;
  own.prompt_tokens = newcomer.prompt_tokens;
  own.output_tokens = newcomer.max_tokens;
  own.priority = newcomer.priority;
  for (int i = 0; i < std::max(1, newcomer.count); ++i) add(own, 0);

  const auto& requests = simulation.requests();
  const auto served = [&](size_t i) { return ahead.at(i)->served || requests[i].first_token_ms >= 0; };
  const auto all_served = [&] {
    if (requests.back().first_token_ms < 0) return false;
    for (size_t i = 0; i < ahead.size(); ++i) {
      if (!served(i)) return false;
    }
    return true;
  };
  // Each is served by the horizon when its wait is within it.
  const double own_ms = alone_ms(newcomer.prompt_tokens);
  double longest_alone_ms = own_ms;
  for (const ForecastRequest* request : ahead) {
    if (!request->served) longest_alone_ms = std::max(longest_alone_ms, alone_ms(request->prompt_tokens));
  }
  simulation.run_until(all_served, horizon_ms + longest_alone_ms);
  out.ahead_ms.reserve(ahead.size());
  for (size_t i = 0; i < ahead.size(); ++i) {
    const ForecastRequest& request = *ahead[i];
    const double first_token_ms = requests[i].first_token_ms;
    out.ahead_ms.push_back(request.served      ? -1
                           : first_token_ms < 0 ? std::numeric_limits<double>::infinity()
                                                : request.waited_ms + first_token_ms -
                                                      alone_ms(request.prompt_tokens));
  }
  if (requests.back().first_token_ms >= 0) {
    out.newcomer_ms = std::max(0.0, requests.back().first_token_ms - own_ms);
    return out;
  }
  // Not served by the horizon: the requests that were waiting were served at some rate since
  // the start (the running ones at once); the newcomer is as many places further as are left.
  const size_t running = load.running.size();
  double served_since = 0;
  double last_served_ms = 0;
  for (size_t i = running; i < ahead.size(); ++i) {
    if (requests[i].first_token_ms < 0) continue;
    ++served_since;
    last_served_ms = std::max(last_served_ms, requests[i].first_token_ms);
  }
  const double places = static_cast<double>(ahead.size() - running + 1);
  const double served_ms =
      served_since > 0 ? last_served_ms * places / served_since : simulation.now_ms() * places;
  // The clock stopped past the horizon: the wait is longer than it, whatever the rate says.
  out.newcomer_ms = std::max(simulation.now_ms(), served_ms) - own_ms;
  return out;
}

}  // namespace brisk
