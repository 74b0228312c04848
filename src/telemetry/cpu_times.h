#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace brisk::telemetry {

// One line of /proc/stat, in clock ticks since boot (USER_HZ).
struct CpuTicks {
  uint64_t user = 0;    // nice included: niced work is still work
  uint64_t system = 0;  // irq and softirq included
  uint64_t idle = 0;
  uint64_t iowait = 0;
  uint64_t steal = 0;  // time the hypervisor gave this vCPU to someone else
  uint64_t total() const { return user + system + idle + iowait + steal; }
};

// The "cpu" line (all cores) and one "cpuN" line per core, as read at one moment.
struct CpuSnapshot {
  CpuTicks all;
  std::vector<CpuTicks> cores;
  // N of each "cpuN" line, parallel to `cores`: offline CPUs have no line, so N is not always
  // the position.
  std::vector<int> core_ids;
};

// Parses /proc/stat's text; nullopt when it has no "cpu" line.
std::optional<CpuSnapshot> parse_proc_stat(std::string_view text);

// Shares of wall time between two readings, each in [0, 1] of that core (or of all cores).
struct CpuShare {
  double user = 0;
  double system = 0;
  double iowait = 0;
  double steal = 0;
  double busy() const { return user + system; }
};

CpuShare cpu_share_between(const CpuTicks& before, const CpuTicks& after);

// Per core, in core order; empty when the two readings list different cores (a CPU went
// offline in between, which makes a per-core comparison meaningless).
std::vector<CpuShare> core_shares_between(const CpuSnapshot& before, const CpuSnapshot& after);

// One core's shares of the wall time between two readings.
struct CoreShare {
  int core = 0;  // N of "cpuN"
  CpuShare share;
};

// core_shares_between with each core's number; empty on the same condition.
std::vector<CoreShare> numbered_core_shares_between(const CpuSnapshot& before,
                                                    const CpuSnapshot& after);

}  // namespace brisk::telemetry
