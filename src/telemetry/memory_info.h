#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace brisk::telemetry {

// The host's memory from /proc/meminfo.
struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // MemAvailable: what can be allocated without swapping
  double used_fraction() const {
    return total_bytes ? 1.0 - static_cast<double>(available_bytes) / total_bytes : 0;
  }
};

// nullopt when MemTotal or MemAvailable is missing.
std::optional<MemoryInfo> parse_meminfo(std::string_view text);

}  // namespace brisk::telemetry
