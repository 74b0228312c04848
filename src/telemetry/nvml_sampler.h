#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

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
};

// How two GPUs are connected, as `nvidia-smi topo -m` shows it.
struct GpuLink {
  int first = 0;
  int second = 0;
  std::string kind;  // "NVLink", "PIX", "PXB", "PHB", "NODE", "SYS" or "unknown"
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

  std::vector<GpuSample> sample() const;
  std::vector<GpuLink> topology() const;

  struct Api;  // the resolved entry points (nvml_sampler.cpp)

 private:
  NvmlSampler(void* library, std::unique_ptr<Api> api, std::vector<void*> devices);
  void* library_;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;
};

}  // namespace brisk::telemetry
