#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "doctor/evidence.h"
#include "doctor/finding.h"
#include "plan/hardware_catalog.h"
#include "plan/performance_model.h"

namespace brisk::doctor {

// The doctor's what-if: brisk plan's calibrated step-by-step simulation of brisk serve, asked
// what each finding's serve_flags would change at the load the probe measured. The
// configuration the evidence shows ("before") and the prescribed one ("after") are simulated
// alike, so the ratio holds even where the absolute figures are off (a calibration's fit error);
// the measured figure beside "before" shows how far off.
struct WhatIfModel {
  std::shared_ptr<const plan::HardwareCatalog> catalog;  // holds the deployment's device
  plan::Deployment deployment;  // brisk serve's defaults on the device
  std::string origin;           // "brisk plan, <device>, <efficiency origin>"
};

// `model` as brisk plan takes it (a catalog name, a GGUF path), `device_id` a catalog entry
// (the hardware floor's: --device, or the GPU NVML found). nullopt with `why_not` when either
// cannot be resolved.
std::optional<WhatIfModel> what_if_model(const std::string& model, const std::string& device_id,
                                         std::string& why_not);

// Fills predicted_effect (or predicted_effect_unavailable) of every finding with serve_flags.
// `model` nullopt: each such finding gets `why_not`.
void predict_effects(const Evidence& evidence, const std::optional<WhatIfModel>& model,
                     const std::string& why_not, std::vector<Finding>& findings);

// "p99 TTFT −60% (4100 → 1640 ms at 8 concurrent, ...; measured now 3800 ms; brisk plan, ...)"
std::string describe_predicted_effect(const PredictedEffect& effect);

}  // namespace brisk::doctor
