#pragma once

#include <vector>

#include "sched/live_load.h"
#include "sched/request.h"
#include "sched/step_scheduler.h"

namespace brisk {

// The request (or the choices of one response) whose wait is forecast.
struct Newcomer {
  int count = 1;
  int prompt_tokens = 1;  // each
  int max_tokens = 0;     // 0: none named
  int priority = 0;
};

// A request not started yet (waiting, or submitted and not handed over), as the forecast sees
// it: its prompt to compute and its max_tokens, else `mean_output_tokens` (0: unknown).
ForecastRequest queued_forecast_request(const Request& request, double mean_output_tokens,
                                        TimePoint now);

struct WaitForecastOptions {
  SchedulerOptions scheduler;  // the server's, as it runs them
  int kv_cells = 0;
  bool buffer_per_sequence = false;
};

// What a newcomer would wait, and what the requests ahead of it would, with it among them.
struct WaitForecast {
  // Until its first token, beyond what its own prompt costs alone (0 while the costs are
  // unknown).
  double newcomer_ms = 0;
  // Each request ahead (running, preempted, waiting, submitted, in that order): its whole wait
  // for its first token since it arrived, beyond its prompt's own cost; -1 for one that already
  // has it; infinity for one not served by the horizon.
  std::vector<double> ahead_ms;
};

// brisk serve's own scheduler runs from the live state (`load`, then `submitted`: requests not
// yet handed over, in arrival order) with the newcomer last, on a runner whose steps take the
// learned costs (sched/serve_simulation.h), so admission prices the wait with the code that
// will schedule it. A request of unknown length is taken to run as long as the newcomer asks
// for, or one token when it asks for none (the forecast is then a lower bound).
//
// The simulation runs until every request ahead and the newcomer have their first token, or
// `horizon_ms` (plus the newcomer's own prompt) has passed; a newcomer not served by then is
// forecast from the rate at which the requests ahead were served.
WaitForecast forecast_waits(const WaitForecastOptions& options, const LiveLoad& load,
                            const std::vector<ForecastRequest>& submitted,
                            const Newcomer& newcomer, double horizon_ms);

}  // namespace brisk
