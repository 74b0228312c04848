#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/run_statistics.h"
#include "bench/slo.h"

namespace brisk::bench {

// One open-loop run of a rate search and the SLO limits it missed (none: it meets the SLO).
struct RateTrial {
  double rate = 0;  // requests/s offered; infinity: every request at once
  RunStatistics stats;
  std::vector<std::string> misses;
  bool meets() const { return misses.empty(); }
};

struct RateSearch {
  // The highest rate tried that met the SLO: 0 when none did, infinity when a burst of every
  // request at once already did.
  double max_rate = 0;
  std::vector<RateTrial> trials;  // in the order they ran
  std::string stopped;  // why the search ended early, in words; empty when it ran its steps
};

// Runs `run_at(rate)` for a burst of every request at once (the capacity), then bisects between
// 0 and that capacity for `steps` more runs: the highest open-loop rate whose run meets every
// limit of `slo` (brisk bench --find-max-rate, brisk tune's rate back-off). `out_of_time`, when
// given, is asked before each run after the first and ends the search with what it found.
RateSearch find_max_rate(const Slo& slo, int steps,
                         const std::function<RunStatistics(double rate)>& run_at,
                         const std::function<void(const RateTrial&)>& on_trial = {},
                         const std::function<bool()>& out_of_time = {});

}  // namespace brisk::bench
