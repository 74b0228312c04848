#include "telemetry/gpu_interconnect.h"

#include <algorithm>

namespace brisk::telemetry {

namespace {

bool ends_at(const GpuNvLinks& from, const PciAddress& to) {
  return from.remote_ends && std::find(from.remote_ends->begin(), from.remote_ends->end(), to) !=
                                 from.remote_ends->end();
}

// A link whose far end is no GPU of this machine ends at an NVSwitch (or, on IBM POWER, at the
// CPU, which also routes GPU-to-GPU traffic over NVLink).
bool reaches_a_switch(const GpuNvLinks& gpu, const std::vector<GpuNvLinks>& gpus) {
  if (!gpu.remote_ends) return false;
  for (const PciAddress& end : *gpu.remote_ends) {
    const bool is_gpu = std::any_of(gpus.begin(), gpus.end(),
                                    [&](const GpuNvLinks& other) { return other.address == end; });
    if (!is_gpu) return true;
  }
  return false;
}

}  // namespace

std::string pcie_path_name(int common_ancestor_level) {
  switch (common_ancestor_level) {
    case 0:  // same board
    case 10:
      return "PIX";
    case 20:
      return "PXB";
    case 30:
      return "PHB";
    case 40:
      return "NODE";
    case 50:
      return "SYS";
    default:
      return "unknown";
  }
}

std::string gpu_link_kind(const std::vector<GpuNvLinks>& gpus, size_t a, size_t b,
                          int common_ancestor_level) {
  const GpuNvLinks& first = gpus.at(a);
  const GpuNvLinks& second = gpus.at(b);
  if (first.remote_ends && second.remote_ends) {
    if (ends_at(first, second.address) || ends_at(second, first.address)) return "NVLink";
    if (reaches_a_switch(first, gpus) && reaches_a_switch(second, gpus)) return "NVLink";
  } else if (first.active_links > 0 && second.active_links > 0) {
    return "NVLink";
  }
  return pcie_path_name(common_ancestor_level);
}

std::optional<double> kib_counter_bytes_per_s(uint64_t before_kib, uint64_t after_kib,
                                              int64_t before_us, int64_t after_us) {
  if (after_us <= before_us || after_kib < before_kib) return std::nullopt;
  return static_cast<double>(after_kib - before_kib) * 1024.0 /
         (static_cast<double>(after_us - before_us) / 1e6);
}

}  // namespace brisk::telemetry
