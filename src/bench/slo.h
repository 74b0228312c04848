#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::bench {

struct RunStatistics;

// One limit of a service-level objective, e.g. `ttft_p99=500ms`: the run's p99 TTFT must be at
// most 500 ms, and a request counts toward goodput only if its own TTFT is at most 500 ms.
struct SloLimit {
  std::string metric;  // ttft, tpot, itl or e2e
  std::string stat;    // p50, p90, p95, p99 or max
  double limit_ms = 0;
};

struct Slo {
  std::vector<SloLimit> limits;

  bool empty() const { return limits.empty(); }
  // Per-request test for goodput. ITL limits apply to runs only (a request has many gaps).
  bool request_meets(double ttft_ms, std::optional<double> tpot_ms, double e2e_ms) const;
  // Every limit holds for the run's statistic.
  bool run_meets(const RunStatistics& stats) const;
  // The limits that a run misses, as "ttft_p99 812.0 > 500", for messages.
  std::vector<std::string> misses(const RunStatistics& stats) const;
};

// Parses "ttft_p99=500ms,tpot_p99=50ms" (units ms or s; a bare number is ms).
std::optional<Slo> parse_slo(std::string_view text, std::string& error);

}  // namespace brisk::bench
