#include "tune/goodput_prediction.h"

#include <cstdlib>

#include "plan/calibration.h"
#include "plan/model_profile.h"
#include "plan/precision.h"

namespace brisk::tune {

namespace {

std::optional<int> int_value(const Setting& setting, const std::string& knob) {
  const auto value = setting.find(knob);
  if (value == setting.end()) return std::nullopt;
  return std::atoi(value->second.c_str());
}

}  // namespace

std::optional<GoodputPrediction> GoodputPrediction::make(const std::string& model,
                                                         const std::string& device_id,
                                                         int input_tokens, int output_tokens,
                                                         const std::vector<SloLimit>& slo,
                                                         std::string& error) {
  GoodputPrediction prediction;
  auto catalog = plan::HardwareCatalog::load("", &error);
  if (!catalog) return std::nullopt;
  prediction.catalog_ = std::make_shared<const plan::HardwareCatalog>(std::move(*catalog));
  prediction.device_ = prediction.catalog_->find(device_id);
  if (!prediction.device_) {
    error = "unknown --device '" + device_id + "'; the catalog has: " + prediction.catalog_->ids();
    return std::nullopt;
  }
  auto profile = plan::resolve_model_profile(model, &error);
  if (!profile) return std::nullopt;
  plan::PlanRequest& request = prediction.request_;
  request.precision =
      profile->stored_precision ? *profile->stored_precision : *plan::parse_precision("bf16");
  request.model = std::move(*profile);
  request.workload.input_tokens = input_tokens;
  request.workload.output_tokens = output_tokens;
  for (const SloLimit& limit : slo) {
    if (limit.metric == "itl" || limit.stat == "max") {
      prediction.unpredicted_.push_back(limit.metric + "_" + limit.stat);
    } else {
      request.slo.push_back(limit);
    }
  }
  request.calibrated = plan::load_calibrations(plan::calibration_file());
  const auto calibrated = request.calibrated.find(device_id);
  prediction.origin_ =
      device_id + ", " +
      (calibrated != request.calibrated.end()
           ? calibrated->second.origin
           : plan::Efficiency::defaults_for(*prediction.device_).origin + " (uncalibrated: run "
                                                                          "brisk plan calibrate)");
  return prediction;
}

double GoodputPrediction::predict(const Setting& setting) const {
  plan::PlanRequest request = request_;
  if (const auto tokens = int_value(setting, "max-batched-tokens")) {
    request.step_token_budget = *tokens;
  }
  if (const auto target = int_value(setting, "target-itl-ms")) {
    request.chunking.target_step_ms = *target;
  }
  if (const auto tokens = int_value(setting, "long-prefill-tokens")) {
    request.chunking.long_prefill_tokens = *tokens;
  }
  if (const auto type = setting.find("kv-type"); type != setting.end()) {
    request.kv_bytes_per_element = plan::kv_cache_bytes_per_element(type->second).value_or(2);
  }
  // To half a percent: the search tells configurations apart from 1% on.
  constexpr double kTolerance = 5e-3;
  return plan::predict_max_rate(request, *device_, int_value(setting, "max-seqs").value_or(0),
                                kTolerance);
}

}  // namespace brisk::tune
