#include "sched/model_residency.h"

#include <algorithm>

namespace brisk {

uint64_t ModelResidency::loaded_bytes(const std::vector<ResidentModel>& models) {
  uint64_t bytes = 0;
  for (const ResidentModel& model : models) {
    if (model.loaded) bytes += model.bytes;
  }
  return bytes;
}

std::optional<uint64_t> ModelResidency::shortfall_beside_pinned(
    const std::vector<ResidentModel>& models, size_t index) const {
  uint64_t needed = models[index].bytes;
  for (size_t i = 0; i < models.size(); ++i) {
    if (i != index && models[i].pinned) needed += models[i].bytes;
  }
  if (needed <= budget_bytes_) return std::nullopt;
  return needed - budget_bytes_;
}

LoadDecision ModelResidency::decide_load(const std::vector<ResidentModel>& models,
                                         size_t wanted) const {
  LoadDecision decision;
  if (auto missing = shortfall_beside_pinned(models, wanted)) {
    decision.kind = LoadDecision::Kind::never;
    decision.missing_bytes = *missing;
    return decision;
  }
  const uint64_t needed = models[wanted].bytes;
  uint64_t used = loaded_bytes(models);
  if (used + needed <= budget_bytes_) return decision;
  // The idle ones that may go, the longest idle first.
  std::vector<size_t> idle;
  for (size_t i = 0; i < models.size(); ++i) {
    const ResidentModel& model = models[i];
    if (i != wanted && model.loaded && !model.pinned && !model.busy) idle.push_back(i);
  }
  std::stable_sort(idle.begin(), idle.end(),
                   [&](size_t a, size_t b) { return models[a].idle_s > models[b].idle_s; });
  for (size_t i : idle) {
    decision.unload.push_back(i);
    used -= models[i].bytes;
    if (used + needed <= budget_bytes_) return decision;
  }
  // Busy models hold the rest: once they are idle it fits (it fits beside the pinned ones).
  decision.kind = LoadDecision::Kind::wait;
  decision.unload.clear();
  return decision;
}

std::vector<size_t> ModelResidency::expired(const std::vector<ResidentModel>& models,
                                            double keep_alive_s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < models.size(); ++i) {
    const ResidentModel& model = models[i];
    if (model.loaded && !model.pinned && !model.busy && model.idle_s > keep_alive_s) {
      out.push_back(i);
    }
  }
  return out;
}

}  // namespace brisk
