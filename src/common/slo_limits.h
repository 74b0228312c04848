#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brisk {

// One limit of a service-level objective, e.g. `ttft_p99=500ms`: the p99 TTFT must be at most
// 500 ms. Shared by `brisk bench --slo` (measured) and `brisk plan --slo` (predicted).
struct SloLimit {
  std::string metric;  // ttft, tpot, itl or e2e
  std::string stat;    // p50, p90, p95, p99 or max
  double limit_ms = 0;
};

// Parses "ttft_p99=500ms,tpot_p99=50ms" (units ms or s; a bare number is ms).
std::optional<std::vector<SloLimit>> parse_slo_limits(std::string_view text, std::string& error);

}  // namespace brisk
