#include "telemetry/nvml_sampler.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace brisk::telemetry {

namespace {

// The few NVML types used, declared here so that building needs no NVIDIA header (their layout
// is NVML's stable C ABI; the values are nvml.h's).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kClockSm = 1;
constexpr unsigned kPcieTx = 0, kPcieRx = 1;
constexpr unsigned kMaxNvLinks = 18;
// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX: KiB of data sent / received since the driver
// loaded, per link (scopeId = link) or, with scopeId = UINT_MAX, summed over all links.
constexpr unsigned kFieldNvLinkDataTx = 138, kFieldNvLinkDataRx = 139;
constexpr unsigned kAllLinks = 0xFFFFFFFFu;
struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlFieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp_us;  // CPU time of the reading, microseconds since 1970
  long long latency_us;
  int value_type;
  NvmlReturn result;  // per field: the value is undefined unless this is success
  union {
    double as_double;
    unsigned as_uint;
    unsigned long as_ulong;
    unsigned long long as_ulonglong;
    long long as_longlong;
  } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t's layout");
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};

template <class Function>
Function* symbol(void* library, const char* name) {
  return reinterpret_cast<Function*>(dlsym(library, name));
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
  // Optional: absent in older drivers, and then not reported.
  NvmlReturn (*field_values)(NvmlDevice, int, NvmlFieldValue*) = nullptr;
  NvmlReturn (*pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*nvlink_remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
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
  api->clock =
      symbol<NvmlReturn(NvmlDevice, unsigned, unsigned*)>(library, "nvmlDeviceGetClockInfo");
  api->power = symbol<NvmlReturn(NvmlDevice, unsigned*)>(library, "nvmlDeviceGetPowerUsage");
  api->pcie =
      symbol<NvmlReturn(NvmlDevice, unsigned, unsigned*)>(library, "nvmlDeviceGetPcieThroughput");
  api->nvlink_state =
      symbol<NvmlReturn(NvmlDevice, unsigned, int*)>(library, "nvmlDeviceGetNvLinkState");
  api->common_ancestor = symbol<NvmlReturn(NvmlDevice, NvmlDevice, int*)>(
      library, "nvmlDeviceGetTopologyCommonAncestor");
  api->field_values =
      symbol<NvmlReturn(NvmlDevice, int, NvmlFieldValue*)>(library, "nvmlDeviceGetFieldValues");
  api->pci_info = symbol<NvmlReturn(NvmlDevice, NvmlPciInfo*)>(library, "nvmlDeviceGetPciInfo_v3");
  api->nvlink_remote_pci = symbol<NvmlReturn(NvmlDevice, unsigned, NvmlPciInfo*)>(
      library, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
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
    : library_(library),
      api_(std::move(api)),
      devices_(std::move(devices)),
      previous_nvlink_(devices_.size()) {}

NvmlSampler::~NvmlSampler() {
  api_->shutdown();
  dlclose(library_);
}

std::vector<unsigned> NvmlSampler::active_nvlinks(void* device) const {
  std::vector<unsigned> links;
  for (unsigned link = 0; api_->nvlink_state && link < kMaxNvLinks; ++link) {
    int active = 0;
    if (api_->nvlink_state(device, link, &active) != kNvmlSuccess) break;
    if (active) links.push_back(link);
  }
  return links;
}

// The data counters summed over all links; drivers that do not sum them (scopeId UINT_MAX) are
// asked link by link.
std::optional<NvmlSampler::NvLinkCounters> NvmlSampler::read_nvlink_counters(
    void* device, const std::vector<unsigned>& links) const {
  if (!api_->field_values || links.empty()) return std::nullopt;
  auto read = [&](const std::vector<unsigned>& scopes) -> std::optional<NvLinkCounters> {
    std::vector<NvmlFieldValue> fields;
    for (unsigned scope : scopes) {
      for (unsigned id : {kFieldNvLinkDataTx, kFieldNvLinkDataRx}) {
        NvmlFieldValue field{};
        field.field_id = id;
        field.scope_id = scope;
        fields.push_back(field);
      }
    }
    if (api_->field_values(device, static_cast<int>(fields.size()), fields.data()) !=
        kNvmlSuccess) {
      return std::nullopt;
    }
    NvLinkCounters counters;
    for (const NvmlFieldValue& field : fields) {
      if (field.result != kNvmlSuccess) return std::nullopt;
      (field.field_id == kFieldNvLinkDataTx ? counters.tx_kib : counters.rx_kib) +=
          field.value.as_ulonglong;
      counters.at_us = std::max<int64_t>(counters.at_us, field.timestamp_us);
    }
    if (counters.at_us <= 0) counters.at_us = now_us();
    return counters;
  };
  if (auto all = read({kAllLinks})) return all;
  return read(links);
}

std::vector<GpuSample> NvmlSampler::sample() {
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
    if (api_->clock && api_->clock(device, kClockSm, &value) == kNvmlSuccess)
      gpu.sm_clock_mhz = value;
    if (api_->power && api_->power(device, &value) == kNvmlSuccess) gpu.power_w = value / 1000.0;
    if (api_->pcie && api_->pcie(device, kPcieTx, &value) == kNvmlSuccess) {
      gpu.pcie_tx_bytes_per_s = value * 1024.0;  // NVML reports KB/s
    }
    if (api_->pcie && api_->pcie(device, kPcieRx, &value) == kNvmlSuccess) {
      gpu.pcie_rx_bytes_per_s = value * 1024.0;
    }
    const std::vector<unsigned> links = active_nvlinks(device);
    gpu.nvlinks_active = static_cast<int>(links.size());
    const std::optional<NvLinkCounters> counters = read_nvlink_counters(device, links);
    const std::optional<NvLinkCounters>& previous = previous_nvlink_[i];
    if (counters && previous) {
      gpu.nvlink_tx_bytes_per_s = kib_counter_bytes_per_s(previous->tx_kib, counters->tx_kib,
                                                          previous->at_us, counters->at_us);
      gpu.nvlink_rx_bytes_per_s = kib_counter_bytes_per_s(previous->rx_kib, counters->rx_kib,
                                                          previous->at_us, counters->at_us);
    }
    previous_nvlink_[i] = counters;
    samples.push_back(gpu);
  }
  return samples;
}

GpuNvLinks NvmlSampler::describe_nvlinks(void* device) const {
  GpuNvLinks links;
  NvmlPciInfo pci{};
  if (api_->pci_info && api_->pci_info(device, &pci) == kNvmlSuccess) {
    links.address = {pci.domain, pci.bus, pci.device};
  }
  const std::vector<unsigned> active = active_nvlinks(device);
  links.active_links = static_cast<int>(active.size());
  if (!api_->pci_info || !api_->nvlink_remote_pci) return links;
  std::vector<PciAddress> ends;
  for (unsigned link : active) {
    NvmlPciInfo remote{};
    if (api_->nvlink_remote_pci(device, link, &remote) != kNvmlSuccess) return links;
    ends.push_back({remote.domain, remote.bus, remote.device});
  }
  links.remote_ends = ends;
  return links;
}

std::vector<GpuLink> NvmlSampler::topology() const {
  std::vector<GpuNvLinks> gpus;
  for (void* device : devices_) gpus.push_back(describe_nvlinks(device));
  std::vector<GpuLink> links;
  for (size_t a = 0; a < devices_.size(); ++a) {
    for (size_t b = a + 1; b < devices_.size(); ++b) {
      int level = -1;
      if (!api_->common_ancestor ||
          api_->common_ancestor(devices_[a], devices_[b], &level) != kNvmlSuccess) {
        level = -1;
      }
      links.push_back({static_cast<int>(a), static_cast<int>(b), gpu_link_kind(gpus, a, b, level)});
    }
  }
  return links;
}

}  // namespace brisk::telemetry
