#include "bench/slo.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "bench/run_statistics.h"

namespace brisk::bench {
namespace {

const LatencySummary* summary_of(const RunStatistics& stats, const std::string& metric) {
  if (metric == "ttft") return &stats.ttft_ms;
  if (metric == "tpot") return &stats.tpot_ms;
  if (metric == "itl") return &stats.itl_ms;
  if (metric == "e2e") return &stats.e2e_ms;
  return nullptr;
}

double stat_of(const LatencySummary& summary, const std::string& stat) {
  if (stat == "mean") return summary.mean;
  if (stat == "p50") return summary.p50;
  if (stat == "p90") return summary.p90;
  if (stat == "p95") return summary.p95;
  if (stat == "p99") return summary.p99;
  return summary.max;
}

}  // namespace

bool Slo::request_meets(double ttft_ms, std::optional<double> tpot_ms, double e2e_ms) const {
  for (const SloLimit& limit : limits) {
    if (limit.metric == "ttft" && ttft_ms > limit.limit_ms) return false;
    if (limit.metric == "tpot" && tpot_ms && *tpot_ms > limit.limit_ms) return false;
    if (limit.metric == "e2e" && e2e_ms > limit.limit_ms) return false;
  }
  return true;
}

bool Slo::run_meets(const RunStatistics& stats) const { return misses(stats).empty(); }

std::vector<std::string> Slo::unmeasured(const RunStatistics& stats) const {
  std::vector<std::string> names;
  for (const SloLimit& limit : limits) {
    if (summary_of(stats, limit.metric)->count == 0) {
      names.push_back(limit.metric + "_" + limit.stat);
    }
  }
  return names;
}

std::vector<std::string> Slo::misses(const RunStatistics& stats) const {
  std::vector<std::string> missed;
  if (stats.ok == 0) missed.push_back("no request succeeded");
  for (const SloLimit& limit : limits) {
    const LatencySummary* summary = summary_of(stats, limit.metric);
    if (summary->count == 0) {  // e.g. TTFT with --no-stream: a limit not measured is not met
      missed.push_back(fmt::format("{}_{} not measured (no samples)", limit.metric, limit.stat));
      continue;
    }
    const double value = stat_of(*summary, limit.stat);
    if (value > limit.limit_ms) {
      missed.push_back(fmt::format("{}_{} {:.1f} ms > {:g} ms", limit.metric, limit.stat, value,
                                   limit.limit_ms));
    }
  }
  return missed;
}

double Slo::worst_ratio(const RunStatistics& stats) const {
  if (stats.ok == 0) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (const SloLimit& limit : limits) {
    const LatencySummary* summary = summary_of(stats, limit.metric);
    if (summary->count == 0) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, stat_of(*summary, limit.stat) / limit.limit_ms);
  }
  return worst;
}

std::optional<Slo> parse_slo(std::string_view text, std::string& error) {
  auto limits = parse_slo_limits(text, error);
  if (!limits) return std::nullopt;
  return Slo{std::move(*limits)};
}

}  // namespace brisk::bench
