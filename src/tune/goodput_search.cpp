#include "tune/goodput_search.h"

#include <cmath>

#include <fmt/format.h>

namespace brisk::tune {

namespace {
constexpr double kFarOverRatio = 4;
}  // namespace

std::vector<std::string> trial_misses(const bench::Slo& slo, const bench::RunStatistics& stats) {
  std::vector<std::string> misses = slo.misses(stats);
  const double sent = static_cast<double>(stats.ok + stats.failed);
  if (stats.failed > 0.01 * sent) {
    misses.push_back(fmt::format("{} of {} requests failed", stats.failed, stats.ok + stats.failed));
  }
  return misses;
}

const bench::RateTrial* Goodput::at_goodput() const {
  for (const bench::RateTrial& trial : trials) {
    if (trial.meets() && trial.rate == rate) return &trial;
  }
  return nullptr;
}

Goodput search_goodput(const bench::Slo& slo, const GoodputSearchOptions& options,
                       const std::function<bench::RunStatistics(double rate)>& run_at,
                       const std::function<bool()>& out_of_time) {
  Goodput result;
  auto run = [&](double rate) {
    bench::RateTrial trial;
    trial.rate = rate;
    trial.stats = run_at(rate);
    trial.misses = trial_misses(slo, trial.stats);
    const bool meets = trial.meets();
    result.trials.push_back(std::move(trial));
    if (meets) {
      result.rate = std::max(result.rate, rate);
    } else {
      result.missed_at = std::min(result.missed_at, rate);
    }
    return meets;
  };
  auto stop_here = [&]() {
    if (result.missed_at <= options.give_up_at_or_below) {
      result.gave_up = true;
      return true;
    }
    if (static_cast<int>(result.trials.size()) >= options.max_runs) {
      result.stopped = "run limit";
      return true;
    }
    if (out_of_time && out_of_time()) {
      result.stopped = "out of time";
      return true;
    }
    return false;
  };
  double rate = options.start_rate;
  if (rate <= 0) {
    if (run(std::numeric_limits<double>::infinity())) {
      result.stopped = "met the SLO with every request at once";
      return result;
    }
    const bench::RateTrial& burst = result.trials.back();
    rate = burst.stats.request_throughput / 2;
    if (rate <= 0) {
      result.stopped = "no request of a burst succeeded";
      return result;
    }
    if (stop_here()) return result;
  }
  const double lowest_rate = rate / options.max_backoff;
  // Bracket: up while it meets, down while it misses.
  while (true) {
    run(rate);
    if (result.rate > 0 && std::isfinite(result.missed_at)) break;
    if (stop_here()) return result;
    // A run that missed by far (a limit 4x over, or nothing served) was deep in overload: one
    // step down would overload again, and an overloaded run is the slowest kind.
    const bool far_over = slo.worst_ratio(result.trials.back().stats) > kFarOverRatio;
    rate = result.rate > 0 ? rate * options.growth
                           : rate / (far_over ? options.growth * options.growth : options.growth);
    if (rate < lowest_rate) {
      result.stopped = "missed the SLO even at the lowest rate tried";
      return result;
    }
  }
  for (int step = 0; step < options.refine_steps; ++step) {
    if (stop_here()) return result;
    run(std::sqrt(result.rate * result.missed_at));
  }
  return result;
}

}  // namespace brisk::tune
