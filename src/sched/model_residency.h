#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace brisk {

// One served model as the residency policy sees it (docs/models.md, "Memory budget").
struct ResidentModel {
  uint64_t bytes = 0;  // what it takes of the budget while loaded
  bool loaded = false;
  bool pinned = false;  // loaded at start, never unloaded
  bool busy = false;    // requests in flight (or waiting for it): never unloaded
  double idle_s = 0;    // since its last request ended (meaningful while loaded and not busy)
};

// What to do so that a model can load within the budget.
struct LoadDecision {
  enum class Kind {
    load,   // after unloading `unload`, in that order (least recently used first)
    wait,   // only busy models hold the memory it needs: try again when one is idle
    never,  // it does not fit beside the pinned models even with every other one unloaded
  };
  Kind kind = Kind::load;
  std::vector<size_t> unload;
  uint64_t missing_bytes = 0;  // never: how much more the budget would need
};

// Decides which models hold memory, without loading or unloading anything itself: the server's
// model registry acts on its decisions. Models are indices into the caller's list.
class ModelResidency {
 public:
  explicit ModelResidency(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  uint64_t budget_bytes() const { return budget_bytes_; }
  // Bytes of the loaded models.
  static uint64_t loaded_bytes(const std::vector<ResidentModel>& models);

  // How model `wanted` (not loaded) can load: the idle unpinned models to unload first, least
  // recently used first and no more than needed.
  LoadDecision decide_load(const std::vector<ResidentModel>& models, size_t wanted) const;

  // The loaded models idle for longer than `keep_alive_s` (not pinned, not busy): to unload.
  static std::vector<size_t> expired(const std::vector<ResidentModel>& models,
                                     double keep_alive_s);

  // How much more than the budget model `index` needs beside the pinned models; nullopt when it
  // fits. A model for which this says anything can never load.
  std::optional<uint64_t> shortfall_beside_pinned(const std::vector<ResidentModel>& models,
                                                  size_t index) const;

 private:
  uint64_t budget_bytes_;
};

}  // namespace brisk
