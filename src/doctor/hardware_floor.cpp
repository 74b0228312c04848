#include "doctor/hardware_floor.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "plan/hardware_catalog.h"
#include "plan/model_profile.h"
#include "plan/precision.h"

namespace brisk::doctor {

namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// "NVIDIA H100 80GB HBM3" → the entry whose id's first word ("h100") the GPU's name contains;
// the longest such id wins (h100-sxm over h100).
const plan::DeviceSpec* match_gpu(const plan::HardwareCatalog& catalog, const std::string& name) {
  const std::string gpu = lowercase(name);
  const plan::DeviceSpec* best = nullptr;
  size_t best_length = 0;
  for (const plan::DeviceSpec& device : catalog.devices()) {
    if (!device.is_gpu()) continue;
    const std::string family = lowercase(device.id.substr(0, device.id.find('-')));
    if (family.size() > best_length && gpu.find(family) != std::string::npos) {
      best = &device;
      best_length = family.size();
    }
  }
  return best;
}

}  // namespace

HardwareFloor find_hardware_floor(const std::string& model, const std::string& device,
                                  const GpuSummary& gpu) {
  HardwareFloor floor;
  std::string error;
  const auto catalog = plan::HardwareCatalog::load("", &error);
  if (!catalog) {
    floor.source = "no hardware catalog: " + error;
    return floor;
  }
  const plan::DeviceSpec* spec = nullptr;
  if (device != "auto") {
    spec = catalog->find(device);
    if (!spec) {
      floor.source = "unknown --device '" + device + "' (brisk plan's catalog: " + catalog->ids() + ")";
      return floor;
    }
  } else if (gpu.present()) {
    spec = match_gpu(*catalog, gpu.peak[0].name);
    if (!spec) {
      floor.source = "GPU '" + gpu.peak[0].name + "' is not in brisk plan's catalog: pass --device";
      return floor;
    }
  } else {
    floor.source = "no GPU found; pass --device (e.g. cpu-2vcpu) for the CPU's floor";
    return floor;
  }
  const auto profile = plan::resolve_model_profile(model, &error);
  if (!profile) {
    floor.source = "model '" + model + "' not resolved (" + error + "); pass --model-file";
    return floor;
  }
  const plan::Precision precision =
      profile->stored_precision.value_or(*plan::parse_precision("f16"));
  const double bytes = static_cast<double>(profile->weight_bytes_read_per_step(precision));
  floor.device = spec->id;
  floor.decode_ms_per_token = bytes / (spec->memory_bandwidth_gb_s * 1e9) * 1000;
  floor.source = fmt::format("brisk plan floor: {:.0f} MB of weights per step / {:.0f} GB/s ({})",
                             bytes / 1e6, spec->memory_bandwidth_gb_s, spec->id);
  return floor;
}

}  // namespace brisk::doctor
