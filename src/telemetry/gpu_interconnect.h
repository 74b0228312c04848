#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace brisk::telemetry {

// How two GPUs are connected, as `nvidia-smi topo -m` shows it.
struct GpuLink {
  int first = 0;
  int second = 0;
  std::string kind;  // "NVLink", "PIX", "PXB", "PHB", "NODE", "SYS" or "unknown"
};

// A PCI function's address (nvmlPciInfo_t's domain, bus, device).
struct PciAddress {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  bool operator==(const PciAddress&) const = default;
};

// One GPU's NVLinks as NVML describes them.
struct GpuNvLinks {
  PciAddress address;
  int active_links = 0;
  // The far end of each active link (nvmlDeviceGetNvLinkRemotePciInfo_v2); nullopt when NVML
  // cannot say (an older driver without the call).
  std::optional<std::vector<PciAddress>> remote_ends;
};

// How GPUs `a` and `b` of `gpus` are connected. NVLink when a link of one ends at the other, or
// when both have links that end at no GPU of this machine: an NVSwitch, through which every GPU
// of the board reaches every other. Without the far ends, both GPUs having active links is
// taken as NVLink (true of the NVLink boards NVML runs on, but it cannot tell two NVLink pairs
// apart). Otherwise `common_ancestor_level` (nvmlDeviceGetTopologyCommonAncestor's, -1 when
// unknown) names the PCIe path.
std::string gpu_link_kind(const std::vector<GpuNvLinks>& gpus, size_t a, size_t b,
                          int common_ancestor_level);

// `nvidia-smi topo -m`'s name for an nvmlGpuTopologyLevel_t.
std::string pcie_path_name(int common_ancestor_level);

// Bytes per second between two readings of a counter of KiB (NVML's NVLink data counters,
// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, count KiB since the driver loaded) taken at
// microsecond timestamps; nullopt when time did not advance or the counter went back (a driver
// reload reset it).
std::optional<double> kib_counter_bytes_per_s(uint64_t before_kib, uint64_t after_kib,
                                              int64_t before_us, int64_t after_us);

}  // namespace brisk::telemetry
