#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/gpu_interconnect.h"

namespace brisk::telemetry {

// One GPU at one moment. Utilization is NVML's: the share of the last sample period in which
// any kernel ran — not how many SMs were busy, so 100% can still leave most of the chip idle.
struct GpuSample {
  int index = 0;
  std::string name;
  std::optional<double> utilization_fraction;
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::optional<double> sm_clock_mhz;
  std::optional<double> power_w;
  std::optional<double> pcie_tx_bytes_per_s;
  std::optional<double> pcie_rx_bytes_per_s;
  int nvlinks_active = 0;
  // All links together since the previous sample; absent on the first sample, without NVLink,
  // or when the driver has no nvmlDeviceGetFieldValues.
  std::optional<double> nvlink_tx_bytes_per_s;
  std::optional<double> nvlink_rx_bytes_per_s;
};

// NVML, loaded at run time with dlopen so that brisk runs (and reports "no NVML") on machines
// without an NVIDIA driver. BRISK_NVML_LIBRARY names another library file to load.
class NvmlSampler {
 public:
  // nullptr with `why_absent` set when the library or a GPU is missing.
  static std::unique_ptr<NvmlSampler> open(std::string& why_absent);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Not const: NVLink throughput is the change of NVML's counters since the previous call.
  std::vector<GpuSample> sample();
  std::vector<GpuLink> topology() const;

  struct Api;  // the resolved entry points (nvml_sampler.cpp)

 private:
  struct NvLinkCounters {
    uint64_t tx_kib = 0;
    uint64_t rx_kib = 0;
    int64_t at_us = 0;
  };

  NvmlSampler(void* library, std::unique_ptr<Api> api, std::vector<void*> devices);
  std::vector<unsigned> active_nvlinks(void* device) const;
  std::optional<NvLinkCounters> read_nvlink_counters(void* device,
                                                     const std::vector<unsigned>& links) const;
  GpuNvLinks describe_nvlinks(void* device) const;

  void* library_;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;
  std::vector<std::optional<NvLinkCounters>> previous_nvlink_;  // per device
};

}  // namespace brisk::telemetry
