#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/capacity_planner.h"
#include "plan/hardware_catalog.h"
#include "plan/memory_model.h"

namespace brisk::plan {

// Several models served side by side (brisk serve --model A --model B): one request per model,
// each with its own model and precision, the same workload (docs/plan.md, "Several models").
struct ModelsOnDevice {
  const DeviceSpec* device = nullptr;
  // Each model alone on one device of this kind, at the workload's concurrency.
  std::vector<MemoryBreakdown> memory;
  // Devices each model needs on its own (1, or more when it must be split by tensor
  // parallelism to fit).
  std::vector<int> own_devices;
  double total_gb = 0;   // every model's weights, KV, activations; the runtime once per device
  double usable_gb = 0;  // one device's capacity less the headroom
  // Whole models packed onto devices (largest first, each into the first with room); a model
  // that needs several devices takes its own. devices[i] lists the indices of the models on it.
  std::vector<std::vector<int>> placement;
  int devices = 0;
  double usd_per_hour = 0;
  // Decode steps: each model's own at the workload's concurrency, and, where models share a
  // device, a token gap when all of them are busy: brisk serve runs one model's step at a time,
  // so it is the sum of their steps.
  std::vector<double> step_ms;
  double shared_itl_ms = 0;  // the slowest device's sum
};

struct MultiModelFit {
  std::vector<ModelsOnDevice> devices;  // cheapest per hour first; those that cannot hold a model last
  std::optional<size_t> recommended;
};

MultiModelFit fit_models(const std::vector<PlanRequest>& requests, const HardwareCatalog& catalog);

void print_multi_model_fit(std::ostream& out, const std::vector<PlanRequest>& requests,
                           const MultiModelFit& fit);
nlohmann::json multi_model_fit_json(const std::vector<PlanRequest>& requests,
                                    const MultiModelFit& fit);

}  // namespace brisk::plan
