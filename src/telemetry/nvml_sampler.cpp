#include "telemetry/nvml_sampler.h"

#include <dlfcn.h>

#include <cstdlib>

namespace brisk::telemetry {

namespace {

// The few NVML types used, declared here so that building needs no NVIDIA header (their layout
// is NVML's stable C ABI).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kClockSm = 1;
constexpr unsigned kPcieTx = 0, kPcieRx = 1;
constexpr unsigned kMaxNvLinks = 18;
struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

template <class Function>
Function* symbol(void* library, const char* name) {
  return reinterpret_cast<Function*>(dlsym(library, name));
}

std::string topology_name(int level) {
  switch (level) {
    case 0:  // same board
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "unknown";
  }
}

}  // namespace

struct NvmlSampler::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*nvlink_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*common_ancestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
};

std::unique_ptr<NvmlSampler> NvmlSampler::open(std::string& why_absent) {
  const char* configured = std::getenv("BRISK_NVML_LIBRARY");
  const std::string path = configured ? configured : "libnvidia-ml.so.1";
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    why_absent = "NVML not loaded (" + path + ": no NVIDIA driver on this machine?)";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  api->init = symbol<NvmlReturn()>(library, "nvmlInit_v2");
  api->shutdown = symbol<NvmlReturn()>(library, "nvmlShutdown");
  api->count = symbol<NvmlReturn(unsigned*)>(library, "nvmlDeviceGetCount_v2");
  api->handle = symbol<NvmlReturn(unsigned, NvmlDevice*)>(library, "nvmlDeviceGetHandleByIndex_v2");
  api->name = symbol<NvmlReturn(NvmlDevice, char*, unsigned)>(library, "nvmlDeviceGetName");
  api->utilization =
      symbol<NvmlReturn(NvmlDevice, NvmlUtilization*)>(library, "nvmlDeviceGetUtilizationRates");
  api->memory = symbol<NvmlReturn(NvmlDevice, NvmlMemory*)>(library, "nvmlDeviceGetMemoryInfo");
  api->clock = symbol<NvmlReturn(NvmlDevice, unsigned, unsigned*)>(library, "nvmlDeviceGetClockInfo");
  api->power = symbol<NvmlReturn(NvmlDevice, unsigned*)>(library, "nvmlDeviceGetPowerUsage");
  api->pcie =
      symbol<NvmlReturn(NvmlDevice, unsigned, unsigned*)>(library, "nvmlDeviceGetPcieThroughput");
  api->nvlink_state =
      symbol<NvmlReturn(NvmlDevice, unsigned, int*)>(library, "nvmlDeviceGetNvLinkState");
  api->common_ancestor = symbol<NvmlReturn(NvmlDevice, NvmlDevice, int*)>(
      library, "nvmlDeviceGetTopologyCommonAncestor");
  unsigned count = 0;
  if (!api->init || !api->shutdown || !api->count || !api->handle || api->init() != kNvmlSuccess) {
    why_absent = "NVML loaded from " + path + " but did not initialize";
    dlclose(library);
    return nullptr;
  }
  if (api->count(&count) != kNvmlSuccess || count == 0) {
    why_absent = "NVML reports no GPU";
    api->shutdown();
    dlclose(library);
    return nullptr;
  }
  std::vector<void*> devices;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (api->handle(i, &device) == kNvmlSuccess) devices.push_back(device);
  }
  return std::unique_ptr<NvmlSampler>(new NvmlSampler(library, std::move(api), std::move(devices)));
}

NvmlSampler::NvmlSampler(void* library, std::unique_ptr<Api> api, std::vector<void*> devices)
    : library_(library), api_(std::move(api)), devices_(std::move(devices)) {}

NvmlSampler::~NvmlSampler() {
  api_->shutdown();
  dlclose(library_);
}

std::vector<GpuSample> NvmlSampler::sample() const {
  std::vector<GpuSample> samples;
  for (size_t i = 0; i < devices_.size(); ++i) {
    NvmlDevice device = devices_[i];
    GpuSample gpu;
    gpu.index = static_cast<int>(i);
    char name[96] = {};
    if (api_->name && api_->name(device, name, sizeof(name)) == kNvmlSuccess) gpu.name = name;
    NvmlUtilization utilization{};
    if (api_->utilization && api_->utilization(device, &utilization) == kNvmlSuccess) {
      gpu.utilization_fraction = utilization.gpu / 100.0;
    }
    NvmlMemory memory{};
    if (api_->memory && api_->memory(device, &memory) == kNvmlSuccess) {
      gpu.memory_used_bytes = static_cast<double>(memory.used);
      gpu.memory_total_bytes = static_cast<double>(memory.total);
    }
    unsigned value = 0;
    if (api_->clock && api_->clock(device, kClockSm, &value) == kNvmlSuccess) gpu.sm_clock_mhz = value;
    if (api_->power && api_->power(device, &value) == kNvmlSuccess) gpu.power_w = value / 1000.0;
    if (api_->pcie && api_->pcie(device, kPcieTx, &value) == kNvmlSuccess) {
      gpu.pcie_tx_bytes_per_s = value * 1024.0;  // NVML reports KB/s
    }
    if (api_->pcie && api_->pcie(device, kPcieRx, &value) == kNvmlSuccess) {
      gpu.pcie_rx_bytes_per_s = value * 1024.0;
    }
    for (unsigned link = 0; api_->nvlink_state && link < kMaxNvLinks; ++link) {
      int active = 0;
      if (api_->nvlink_state(device, link, &active) != kNvmlSuccess) break;
      gpu.nvlinks_active += active ? 1 : 0;
    }
    samples.push_back(gpu);
  }
  return samples;
}

std::vector<GpuLink> NvmlSampler::topology() const {
  std::vector<GpuLink> links;
  const std::vector<GpuSample> now = sample();
  for (size_t a = 0; a < devices_.size(); ++a) {
    for (size_t b = a + 1; b < devices_.size(); ++b) {
      GpuLink link{static_cast<int>(a), static_cast<int>(b), "unknown"};
      int level = -1;
      // Both with active NVLinks on one board is how NVLink systems look; PCIe otherwise.
      if (now[a].nvlinks_active > 0 && now[b].nvlinks_active > 0) {
        link.kind = "NVLink";
      } else if (api_->common_ancestor &&
                 api_->common_ancestor(devices_[a], devices_[b], &level) == kNvmlSuccess) {
        link.kind = topology_name(level);
      }
      links.push_back(link);
    }
  }
  return links;
}

}  // namespace brisk::telemetry
