#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "sched/model_residency.h"
#include "server/api_error.h"
#include "server/served_model.h"

namespace brisk {

// How the registry keeps models in memory (docs/models.md, "Memory budget").
struct ResidencyOptions {
  uint64_t memory_budget_bytes = 0;  // of each device
  // Unload a model idle this long (not pinned, nothing in flight); nullopt: keep it until the
  // memory is needed.
  std::optional<double> keep_alive_s;
  // A request waits at most this long for its model to load (memory held by busy models
  // included), then gets a 503 with Retry-After.
  double max_load_wait_s = 120;
};

// A model's parts held for one request, and how long the request waited for them to load.
struct ModelHold {
  std::shared_ptr<LoadedModel> model;
  double load_wait_ms = 0;
};

// The models a server serves, by name or alias, and which of them are loaded. A request names
// its model ("model"); one that names none gets the first model of the kind its route serves.
// One thread (the residency thread) loads and unloads: requests for a model that is not loaded
// wait for it, never the requests of loaded models.
class ModelRegistry {
 public:
  explicit ModelRegistry(ResidencyOptions options = {});
  ~ModelRegistry();

  // False, with why, when a model of that name is already served.
  bool add(std::unique_ptr<ServedModel> model, std::string* error);
  // Null when no model has that name.
  ServedModel* find(std::string_view name) const;
  // The first model added: /tokenize's when the body names none.
  ServedModel& default_model() const { return *models_.front(); }
  // The first model of `kind`, the default of routes only that kind serves; null when none is.
  ServedModel* first_of(ModelKind kind) const;
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }
  bool several() const { return models_.size() > 1; }
  // Every served name, quoted and comma-separated, for messages: "'a', 'b'".
  std::string quoted_names() const;
  const ResidencyOptions& residency_options() const { return options_; }

  // Before serving: the models of one device (--device; the default one for those without)
  // take turns of that device's arbiter; the pinned models load, then the others in order while they fit the budget without unloading
  // any. Says why not when a model can never fit beside the pinned ones or a load fails.
  std::optional<std::string> load_at_start();
  // Starts the residency thread (loads on demand, --keep-alive).
  void start_residency();
  // One per device that several models share; none while each model has its own device.
  const std::vector<std::unique_ptr<DeviceArbiter>>& arbiters() const { return arbiters_; }

  using HoldOutcome = std::variant<ModelHold, ApiError>;
  using HoldCallback = std::function<void(HoldOutcome)>;
  // A hold on `model` at once when it is loaded (or a 429 when too many wait for its load);
  // else nullopt, and `later` is called from the residency thread once it has loaded, or with
  // why not (503: its load failed or took past --max-load-wait). `reason`: request or api.
  std::optional<HoldOutcome> hold(ServedModel& model, HoldCallback later,
                                  const std::string& reason = "request");
  enum class UnloadResult { unloaded, busy, pinned };
  UnloadResult unload(ServedModel& model);

  // Every model drains at once, for up to `drain_timeout`; waiting requests get a 503.
  void shutdown_all(std::chrono::milliseconds drain_timeout);
  // Memory of the loaded models, and the budget, as /metrics shows them.
  std::string render_prometheus() const;

 private:
  struct Waiter {
    ServedModel* model;
    HoldCallback then;
    std::string reason;
    TimePoint since;
  };
  void residency_loop();
  // The models as the residency of `device`'s budget sees them: those of other devices take
  // none of it (0 bytes, never unloaded for it).
  std::vector<ResidentModel> residency_view(TimePoint now, int device) const;
  size_t index_of(const ServedModel& model) const;
  // Fails the waiters of model `index` (all with `error`), outside the lock.
  void fail_waiters(size_t index, const ApiError& error);
  ApiError missing_memory_error(const ServedModel& model, uint64_t missing_bytes) const;

  ResidencyOptions options_;
  ModelResidency residency_;
  // Declared first, destroyed last: the models' threads take its turns until they stop.
  std::vector<std::unique_ptr<DeviceArbiter>> arbiters_;
  std::vector<std::unique_ptr<ServedModel>> models_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Waiter> waiters_;
  bool stopping_ = false;
  std::thread residency_thread_;
};

// The top-level "model" of a JSON request body, read without building the document (it stops at
// the field); nullopt when the body is no JSON object or names no model as a string (the route's
// own parsing then says what is wrong).
std::optional<std::string> requested_model_name(std::string_view body);

// Bytes as people read them: "812 MiB", "1.5 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace brisk
