#pragma once

#include <string>

#include "doctor/evidence.h"

namespace brisk::doctor {

// The decode floor of `brisk plan`: the bytes one decode step must read (every weight, once)
// over the device's published memory bandwidth. `model` is what the server calls its model (a
// catalog name, a GGUF path) or --model-file; `device` a catalog id, or "auto": the catalog
// entry whose name matches the GPU NVML found. Unknown (-1) with the reason in `source` when
// either cannot be resolved.
HardwareFloor find_hardware_floor(const std::string& model, const std::string& device,
                                  const GpuSummary& gpu);

}  // namespace brisk::doctor
