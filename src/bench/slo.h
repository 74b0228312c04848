#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/slo_limits.h"

namespace brisk::bench {

struct RunStatistics;

// A run meets a limit such as `ttft_p99=500ms` when its p99 TTFT is at most 500 ms; a request
// counts toward goodput only if its own TTFT is at most 500 ms.
using brisk::SloLimit;

struct Slo {
  std::vector<SloLimit> limits;

  bool empty() const { return limits.empty(); }
  // Per-request test for goodput. ITL limits apply to runs only (a request has many gaps).
  bool request_meets(double ttft_ms, std::optional<double> tpot_ms, double e2e_ms) const;
  // Every limit holds for the run's statistic.
  bool run_meets(const RunStatistics& stats) const;
  // The limits that a run misses, as "ttft_p99 812.0 > 500", for messages; a limit whose
  // latency has no samples (TTFT and ITL with --no-stream) is missed as "not measured".
  std::vector<std::string> misses(const RunStatistics& stats) const;
  // The largest value / limit over the limits (above 1: missed by that factor); infinity when no
  // request succeeded or a limit has no samples.
  double worst_ratio(const RunStatistics& stats) const;
  // The limits whose latency the run has no sample of, as "ttft_p99".
  std::vector<std::string> unmeasured(const RunStatistics& stats) const;
};

// Parses "ttft_p99=500ms,tpot_p99=50ms" (units ms or s; a bare number is ms).
std::optional<Slo> parse_slo(std::string_view text, std::string& error);

}  // namespace brisk::bench
