#include "telemetry/cpu_times.h"

#include <cstdlib>
#include <sstream>
#include <string>

namespace brisk::telemetry {

namespace {

// "cpu  4705 150 1120 16250 520 30 45 7 0 0": user nice system idle iowait irq softirq steal
// guest guest_nice. Guest time is already inside user, so it is not added again.
std::optional<CpuTicks> parse_cpu_line(const std::string& line) {
  std::istringstream fields(line);
  std::string label;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  fields >> label >> user >> nice >> system >> idle;
  if (!fields) return std::nullopt;
  fields >> iowait >> irq >> softirq >> steal;  // absent on very old kernels: stay 0
  return CpuTicks{user + nice, system + irq + softirq, idle, iowait, steal};
}

double fraction(uint64_t part_before, uint64_t part_after, uint64_t elapsed) {
  if (elapsed == 0 || part_after < part_before) return 0;
  return static_cast<double>(part_after - part_before) / static_cast<double>(elapsed);
}

}  // namespace

std::optional<CpuSnapshot> parse_proc_stat(std::string_view text) {
  std::istringstream lines{std::string(text)};
  std::string line;
  CpuSnapshot snapshot;
  bool has_total = false;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    const auto ticks = parse_cpu_line(line);
    if (!ticks) continue;
    if (line.size() > 3 && line[3] == ' ') {
      snapshot.all = *ticks;
      has_total = true;
    } else {
      snapshot.cores.push_back(*ticks);
      snapshot.core_ids.push_back(std::atoi(line.c_str() + 3));
    }
  }
  if (!has_total) return std::nullopt;
  return snapshot;
}

CpuShare cpu_share_between(const CpuTicks& before, const CpuTicks& after) {
  const uint64_t elapsed = after.total() > before.total() ? after.total() - before.total() : 0;
  return {
      fraction(before.user, after.user, elapsed), fraction(before.system, after.system, elapsed),
      fraction(before.iowait, after.iowait, elapsed), fraction(before.steal, after.steal, elapsed)};
}

std::vector<CpuShare> core_shares_between(const CpuSnapshot& before, const CpuSnapshot& after) {
  std::vector<CpuShare> shares;
  if (before.cores.size() != after.cores.size() || before.core_ids != after.core_ids) {
    return shares;
  }
  for (size_t i = 0; i < before.cores.size(); ++i) {
    shares.push_back(cpu_share_between(before.cores[i], after.cores[i]));
  }
  return shares;
}

std::vector<CoreShare> numbered_core_shares_between(const CpuSnapshot& before,
                                                    const CpuSnapshot& after) {
  std::vector<CoreShare> numbered;
  const std::vector<CpuShare> shares = core_shares_between(before, after);
  for (size_t i = 0; i < shares.size(); ++i) {
    const int core = i < after.core_ids.size() ? after.core_ids[i] : static_cast<int>(i);
    numbered.push_back({core, shares[i]});
  }
  return numbered;
}

}  // namespace brisk::telemetry
