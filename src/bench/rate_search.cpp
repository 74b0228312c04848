#include "bench/rate_search.h"

#include <limits>

namespace brisk::bench {

RateSearch find_max_rate(const Slo& slo, int steps,
                         const std::function<RunStatistics(double rate)>& run_at,
                         const std::function<void(const RateTrial&)>& on_trial,
                         const std::function<bool()>& out_of_time) {
  RateSearch search;
  auto run = [&](double rate) -> const RateTrial& {
    RateTrial trial;
    trial.rate = rate;
    trial.stats = run_at(rate);
    trial.misses = slo.misses(trial.stats);
    search.trials.push_back(std::move(trial));
    if (on_trial) on_trial(search.trials.back());
    return search.trials.back();
  };
  const RateTrial& burst = run(std::numeric_limits<double>::infinity());
  if (burst.meets()) {
    search.max_rate = std::numeric_limits<double>::infinity();
    return search;
  }
  // A limit the run cannot measure would be "missed" at every rate.
  if (const auto unmeasured = slo.unmeasured(burst.stats);
      burst.stats.ok > 0 && !unmeasured.empty()) {
    search.stopped = unmeasured.front() + " not measured (no samples)";
    return search;
  }
  double meets = 0, misses = burst.stats.request_throughput;
  for (int step = 0; step < steps && misses > 0; ++step) {
    if (out_of_time && out_of_time()) {
      search.stopped = "out of time";
      break;
    }
    const double rate = (meets + misses) / 2;
    (run(rate).meets() ? meets : misses) = rate;
  }
  search.max_rate = meets;
  return search;
}

}  // namespace brisk::bench
