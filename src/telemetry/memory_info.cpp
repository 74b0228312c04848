#include "telemetry/memory_info.h"

#include <sstream>
#include <string>

namespace brisk::telemetry {

std::optional<MemoryInfo> parse_meminfo(std::string_view text) {
  std::istringstream lines{std::string(text)};
  std::string line;
  std::optional<uint64_t> total_kib, available_kib;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemTotal:") total_kib = kib;
    if (key == "MemAvailable:") available_kib = kib;
  }
  if (!total_kib || !available_kib) return std::nullopt;
  return MemoryInfo{*total_kib * 1024, *available_kib * 1024};
}

}  // namespace brisk::telemetry
