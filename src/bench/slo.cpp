#include "bench/slo.h"

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
  if (stat == "p50") return summary.p50;
  if (stat == "p90") return summary.p90;
  if (stat == "p95") return summary.p95;
  if (stat == "p99") return summary.p99;
  return summary.max;
}

std::optional<double> parse_duration_ms(std::string_view text) {
  double scale = 1.0;
  if (text.ends_with("ms")) {
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
    scale = 1000.0;
  }
  try {
    size_t used = 0;
    const std::string number(text);
    const double value = std::stod(number, &used);
    if (used != number.size() || !(value > 0)) return std::nullopt;
    return value * scale;
  } catch (const std::exception&) {
    return std::nullopt;
  }
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

std::vector<std::string> Slo::misses(const RunStatistics& stats) const {
  std::vector<std::string> missed;
  if (stats.ok == 0) missed.push_back("no request succeeded");
  for (const SloLimit& limit : limits) {
    const LatencySummary* summary = summary_of(stats, limit.metric);
    const double value = stat_of(*summary, limit.stat);
    if (value > limit.limit_ms) {
      missed.push_back(fmt::format("{}_{} {:.1f} ms > {:g} ms", limit.metric, limit.stat, value,
                                   limit.limit_ms));
    }
  }
  return missed;
}

std::optional<Slo> parse_slo(std::string_view text, std::string& error) {
  Slo slo;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t equals = item.find('=');
    const size_t underscore = item.find('_');
    if (equals == std::string_view::npos || underscore == std::string_view::npos ||
        underscore > equals) {
      error = fmt::format("'{}' is not METRIC_STAT=LIMIT (e.g. ttft_p99=500ms)", item);
      return std::nullopt;
    }
    SloLimit limit;
    limit.metric = std::string(item.substr(0, underscore));
    limit.stat = std::string(item.substr(underscore + 1, equals - underscore - 1));
    const auto limit_ms = parse_duration_ms(item.substr(equals + 1));
    if (limit.metric != "ttft" && limit.metric != "tpot" && limit.metric != "itl" &&
        limit.metric != "e2e") {
      error = fmt::format("unknown SLO metric '{}' (ttft, tpot, itl or e2e)", limit.metric);
      return std::nullopt;
    }
    if (limit.stat != "p50" && limit.stat != "p90" && limit.stat != "p95" && limit.stat != "p99" &&
        limit.stat != "max") {
      error = fmt::format("unknown SLO statistic '{}' (p50, p90, p95, p99 or max)", limit.stat);
      return std::nullopt;
    }
    if (!limit_ms) {
      error = fmt::format("'{}' needs a positive limit such as 500ms or 0.5s", item);
      return std::nullopt;
    }
    limit.limit_ms = *limit_ms;
    slo.limits.push_back(limit);
  }
  return slo;
}

}  // namespace brisk::bench
