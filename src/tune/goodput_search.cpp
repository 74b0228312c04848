#include "tune/goodput_search.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

namespace brisk::tune {

namespace {
constexpr double kFarOverRatio = 4;
}  // namespace

std::vector<std::string> trial_misses(const bench::Slo& slo, const bench::RunStatistics& stats) {
  if (!stats.abandoned.empty()) return {"abandoned: " + stats.abandoned};
  std::vector<std::string> misses = slo.misses(stats);
  const double sent = static_cast<double>(stats.ok + stats.failed);
  if (stats.failed > 0.01 * sent) {
    misses.push_back(fmt::format("{} of {} requests failed", stats.failed, stats.ok + stats.failed));
  }
  return misses;
}

TrialResolution requests_to_resolve(const bench::Slo& slo) {
  TrialResolution resolution;
  for (const SloLimit& limit : slo.limits) {
    if (limit.stat.size() < 2 || limit.stat[0] != 'p') continue;  // mean, max
    const double q = std::stod(limit.stat.substr(1));
    const int requests = static_cast<int>(std::ceil(100 / (100 - q) - 1e-9));
    if (requests > resolution.requests) {
      resolution.requests = requests;
      resolution.limit = limit.metric + "_" + limit.stat;
    }
  }
  return resolution;
}

namespace {

// How many of `samples` values must exceed a limit for their `stat` (p50 … p99, max; the
// linear-interpolation percentile brisk bench reports) to exceed it whatever the others are.
int certain_misses_needed(const std::string& stat, int samples) {
  if (samples <= 0) return 1;
  if (stat == "max") return 1;
  const double q = std::stod(stat.substr(1)) / 100;
  // The percentile interpolates from the value at floor(q (n - 1)) upward: with that one over
  // the limit, the percentile is too.
  return samples - static_cast<int>(std::floor(q * (samples - 1)));
}

// The milliseconds a request has certainly taken for `metric` by `now`: its measure when known,
// a lower bound while it waits, nothing for what cannot be bounded yet (TPOT in flight).
std::optional<double> certain_ms(const std::string& metric, const bench::RequestRecord& record,
                                 TimePoint now) {
  if (record.scheduled == TimePoint{} || record.scheduled > now) return std::nullopt;
  const bool done = record.end != TimePoint{};
  if (metric == "ttft") {
    if (record.has_first_content()) return ms_between(record.scheduled, record.first_content());
    return ms_between(record.scheduled, done ? record.end : now);
  }
  if (metric == "e2e") return ms_between(record.scheduled, done ? record.end : now);
  if (metric == "tpot" && done && record.has_first_content() && record.completion_tokens >= 2) {
    return ms_between(record.first_content(), record.end) / (record.completion_tokens - 1);
  }
  return std::nullopt;
}

}  // namespace

std::string trial_cannot_meet(const bench::Slo& slo,
                              const std::vector<bench::RequestRecord>& records, TimePoint now) {
  int measured = 0, failed = 0;
  const bench::RequestRecord* first_failure = nullptr;
  for (const bench::RequestRecord& record : records) {
    if (record.warmup) continue;
    ++measured;
    if (record.end != TimePoint{} && !record.ok()) {
      ++failed;
      if (!first_failure) first_failure = &record;
    }
  }
  if (failed > 0.01 * measured) {
    return fmt::format("{} of {} requests failed ({}: {})", failed, measured,
                       bench::error_name(first_failure->error), first_failure->error_detail);
  }
  for (const SloLimit& limit : slo.limits) {
    if (limit.metric == "itl") continue;  // pooled over the run's gaps: judged at its end
    int over = 0;
    for (const bench::RequestRecord& record : records) {
      if (record.warmup || !record.ok()) continue;
      const auto ms = certain_ms(limit.metric, record, now);
      if (ms && *ms > limit.limit_ms) ++over;
    }
    // A failure leaves the latency samples; each one allowed shrinks them by one.
    const int samples = measured - static_cast<int>(std::floor(0.01 * measured));
    const int needed = std::max(certain_misses_needed(limit.stat, measured),
                                certain_misses_needed(limit.stat, samples));
    if (over >= needed) {
      return fmt::format("{} of {} requests already over {}_{} {:.0f} ms", over, measured,
                         limit.metric, limit.stat, limit.limit_ms);
    }
  }
  return {};
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
