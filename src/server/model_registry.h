#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/served_model.h"

namespace brisk {

// The models a server serves, by name or alias. A request names its model ("model"); one that
// names none gets the first model of the kind its route serves.
class ModelRegistry {
 public:
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

  // Starts every model; with several, their steps first take turns of one device arbiter.
  void start_all();
  // Null with one model: its device is its own.
  const DeviceArbiter* arbiter() const { return arbiter_.get(); }
  // Every model drains at once, for up to `drain_timeout`.
  void shutdown_all(std::chrono::milliseconds drain_timeout);

 private:
  // Declared first, destroyed last: the models' threads take its turns until they stop.
  std::unique_ptr<DeviceArbiter> arbiter_;
  std::vector<std::unique_ptr<ServedModel>> models_;
};

// The top-level "model" of a JSON request body, read without building the document (it stops at
// the field); nullopt when the body is no JSON object or names no model as a string (the route's
// own parsing then says what is wrong).
std::optional<std::string> requested_model_name(std::string_view body);

}  // namespace brisk
