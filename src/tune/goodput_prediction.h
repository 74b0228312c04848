#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/slo_limits.h"
#include "plan/capacity_planner.h"
#include "plan/hardware_catalog.h"
#include "tune/knob.h"

namespace brisk::tune {

// brisk plan's calibrated simulation of brisk serve, asked for each candidate's goodput: the
// highest Poisson rate it predicts within the SLO with that candidate's --max-seqs,
// --max-batched-tokens, --target-itl-ms and --long-prefill-tokens (the knobs it models; the
// others predict alike).
class GoodputPrediction {
 public:
  // `model` as brisk plan takes it (a catalog name, a GGUF); `device_id` a catalog entry (this
  // machine: its calibration, from `brisk plan calibrate`, is used when there is one). SLO
  // limits the simulation cannot predict (ITL) are left out and listed in `unpredicted`.
  static std::optional<GoodputPrediction> make(const std::string& model,
                                               const std::string& device_id, int input_tokens,
                                               int output_tokens,
                                               const std::vector<SloLimit>& slo,
                                               std::string& error);

  double predict(const Setting& setting) const;
  const std::string& origin() const { return origin_; }  // device and efficiency, in words
  const std::vector<std::string>& unpredicted() const { return unpredicted_; }

 private:
  std::shared_ptr<const plan::HardwareCatalog> catalog_;
  const plan::DeviceSpec* device_ = nullptr;
  plan::PlanRequest request_;
  std::string origin_;
  std::vector<std::string> unpredicted_;
};

}  // namespace brisk::tune
