#include "server/model_registry.h"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

namespace brisk {
namespace {

// A SAX reader that keeps the string value of the top-level key "model" and stops there.
class ModelFieldReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> model;

  bool null() override { return value_seen(); }
  bool boolean(bool) override { return value_seen(); }
  bool number_integer(number_integer_t) override { return value_seen(); }
  bool number_unsigned(number_unsigned_t) override { return value_seen(); }
  bool number_float(number_float_t, const string_t&) override { return value_seen(); }
  bool binary(binary_t&) override { return value_seen(); }
  bool string(string_t& value) override {
    if (at_model_value()) {
      model = value;
      return false;  // found: stop reading
    }
    return value_seen();
  }
  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool key(string_t& name) override {
    model_key_ = depth_ == 1 && name == "model";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool at_model_value() const { return depth_ == 1 && model_key_; }
  // Any other value right after the top-level "model" key: the field is there but no string.
  bool value_seen() { return !at_model_value(); }
  bool open() {
    if (at_model_value()) return false;
    ++depth_;
    model_key_ = false;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }

  int depth_ = 0;
  bool model_key_ = false;
};

}  // namespace

ModelRegistry::ModelRegistry(ResidencyOptions options)
    : options_(std::move(options)), residency_(options_.memory_budget_bytes) {}

ModelRegistry::~ModelRegistry() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (residency_thread_.joinable()) residency_thread_.join();
}

bool ModelRegistry::add(std::unique_ptr<ServedModel> model, std::string* error) {
  std::vector<std::string> names = model->aliases();
  names.push_back(model->name());
  for (const std::string& name : names) {
    if (find(name)) {
      *error = fmt::format("two models are served as '{}': give each its own name", name);
      return false;
    }
  }
  models_.push_back(std::move(model));
  return true;
}

ServedModel* ModelRegistry::find(std::string_view name) const {
  for (const auto& model : models_) {
    if (model->answers_to(name)) return model.get();
  }
  return nullptr;
}

ServedModel* ModelRegistry::first_of(ModelKind kind) const {
  for (const auto& model : models_) {
    if (model->kind() == kind) return model.get();
  }
  return nullptr;
}

std::string ModelRegistry::quoted_names() const {
  std::string names;
  for (const auto& model : models_) {
    names += (names.empty() ? "'" : ", '") + model->name() + "'";
  }
  return names;
}

size_t ModelRegistry::index_of(const ServedModel& model) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].get() == &model) return i;
  }
  return models_.size();
}

std::vector<ResidentModel> ModelRegistry::residency_view(TimePoint now, int device) const {
  std::vector<ResidentModel> view;
  for (const auto& model : models_) {
    ResidentModel resident;
    const bool here = model->device() == device;
    resident.bytes = here ? model->memory_bytes() : 0;
    resident.pinned = model->pinned() || !here;
    resident.loaded = model->state() != ModelState::unloaded;  // a loading one holds its memory
    resident.busy = model->busy();
    resident.idle_s = model->idle_seconds(now);
    view.push_back(resident);
  }
  return view;
}

ApiError ModelRegistry::missing_memory_error(const ServedModel& model,
                                             uint64_t missing_bytes) const {
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  error.code = "insufficient_memory";
  error.message = fmt::format(
      "'{}' needs {} of memory, and beside the pinned models it does not fit --memory-budget "
      "{}: {} is missing (raise --memory-budget, unpin a model, or lower its --ctx-size or --cache-ram)",
      model.name(), format_bytes(model.memory_bytes()),
      format_bytes(options_.memory_budget_bytes), format_bytes(missing_bytes));
  return error;
}

std::optional<std::string> ModelRegistry::load_at_start() {
  // The models of one device (the CPU cores, or one GPU) run one model's step at a time.
  std::map<int, std::vector<ServedModel*>> by_device;
  for (const auto& model : models_) by_device[model->device()].push_back(model.get());
  for (const auto& [device, sharing] : by_device) {
    if (sharing.size() < 2) continue;
    arbiters_.push_back(std::make_unique<DeviceArbiter>());
    for (ServedModel* model : sharing) model->share_device(*arbiters_.back());
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    const std::vector<ResidentModel> view = residency_view(Clock::now(), models_[i]->device());
    if (auto missing = residency_.shortfall_beside_pinned(view, i)) {
      return missing_memory_error(*models_[i], *missing).message;
    }
  }
  // The pinned models first, then the others in order while they fit.
  for (const bool pinned : {true, false}) {
    for (const auto& model : models_) {
      if (model->pinned() != pinned) continue;
      const uint64_t used =
          ModelResidency::loaded_bytes(residency_view(Clock::now(), model->device()));
      if (!pinned && used + model->memory_bytes() > options_.memory_budget_bytes) {
        spdlog::info(
            "{}: not loaded at start ({} beside the {} loaded would pass --memory-budget {}); "
            "it loads when a request names it",
            model->name(), format_bytes(model->memory_bytes()), format_bytes(used),
            format_bytes(options_.memory_budget_bytes));
        continue;
      }
      std::string error;
      if (!model->load("start", &error)) return error;
    }
  }
  return std::nullopt;
}

void ModelRegistry::start_residency() {
  residency_thread_ = std::thread([this] { residency_loop(); });
}

std::optional<ModelRegistry::HoldOutcome> ModelRegistry::hold(ServedModel& model,
                                                              HoldCallback later,
                                                              const std::string& reason) {
  if (auto held = model.hold()) return ModelHold{std::move(held), 0};
  std::unique_lock lock(mutex_);
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  if (stopping_) {
    error.code = "shutting_down";
    error.message = "the server is shutting down";
  } else {
    const auto waiting = std::count_if(waiters_.begin(), waiters_.end(),
                                       [&](const Waiter& w) { return w.model == &model; });
    if (waiting < model.max_waiting()) {
      waiters_.push_back(Waiter{&model, std::move(later), reason, Clock::now()});
      lock.unlock();
      wake_.notify_all();
      return std::nullopt;
    }
    error.status = 429;
    error.type = "rate_limit_exceeded";
    error.code = "queue_full";
    error.message = fmt::format(
        "{} requests already wait for '{}' to load, its limit (--max-queued-requests); retry "
        "after a short wait",
        waiting, model.name());
  }
  return error;
}

ModelRegistry::UnloadResult ModelRegistry::unload(ServedModel& model) {
  if (model.pinned()) return UnloadResult::pinned;
  return model.unload_if_idle("api") ? UnloadResult::unloaded : UnloadResult::busy;
}

void ModelRegistry::fail_waiters(size_t index, const ApiError& error) {
  std::vector<Waiter> failed;
  {
    std::lock_guard lock(mutex_);
    auto moved = std::stable_partition(waiters_.begin(), waiters_.end(), [&](const Waiter& w) {
      return w.model != models_[index].get();
    });
    failed.assign(std::make_move_iterator(moved), std::make_move_iterator(waiters_.end()));
    waiters_.erase(moved, waiters_.end());
  }
  for (Waiter& waiter : failed) waiter.then(error);
}

void ModelRegistry::residency_loop() {
  std::unique_lock lock(mutex_);
  bool loaded_one = false;
  while (!stopping_) {
    // Waiters are looked at often (a busy model may free memory any time); idle models each
    // second, for --keep-alive. A model just loaded goes to its waiters at once.
    if (!loaded_one) {
      wake_.wait_for(lock, waiters_.empty() ? std::chrono::milliseconds(1000)
                                            : std::chrono::milliseconds(50));
    }
    if (stopping_) break;
    const TimePoint now = Clock::now();
    // Hand the loaded models to their waiters; a waiter that waited too long gets a 503.
    std::vector<std::pair<Waiter, std::variant<ModelHold, ApiError>>> answered;
    ServedModel* to_load = nullptr;
    std::string reason;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      const double waited_ms = std::chrono::duration<double, std::milli>(now - it->since).count();
      if (auto held = it->model->hold()) {
        answered.emplace_back(std::move(*it), ModelHold{std::move(held), waited_ms});
        it = waiters_.erase(it);
        continue;
      }
      if (waited_ms > options_.max_load_wait_s * 1000) {
        ApiError error;
        error.status = 503;
        error.type = "server_error";
        error.code = "model_load_timeout";
        error.message = fmt::format(
            "'{}' could not be loaded within --max-load-wait {} s: the memory it needs is held "
            "by models with requests in flight; retry later",
            it->model->name(), options_.max_load_wait_s);
        answered.emplace_back(std::move(*it), error);
        it = waiters_.erase(it);
        continue;
      }
      if (!to_load && it->model->state() == ModelState::unloaded) {
        to_load = it->model;
        reason = it->reason;
      }
      ++it;
    }
    lock.unlock();
    for (auto& [waiter, outcome] : answered) waiter.then(std::move(outcome));
    answered.clear();
    if (to_load) {
      const size_t index = index_of(*to_load);
      const LoadDecision decision =
          residency_.decide_load(residency_view(now, to_load->device()), index);
      if (decision.kind == LoadDecision::Kind::never) {
        fail_waiters(index, missing_memory_error(*to_load, decision.missing_bytes));
      } else if (decision.kind == LoadDecision::Kind::load) {
        bool room = true;
        for (size_t i : decision.unload) room = room && models_[i]->unload_if_idle("memory");
        std::string error;
        if (room && !to_load->load(reason, &error)) {
          ApiError failed;
          failed.status = 503;
          failed.type = "server_error";
          failed.code = "model_load_failed";
          failed.message = fmt::format("loading '{}' failed: {}", to_load->name(), error);
          spdlog::error("{}", failed.message);
          fail_waiters(index, failed);
        }
      }
    }
    if (options_.keep_alive_s) {
      // Every model as it is: keep-alive looks at each one's idle time, not at the budget.
      std::vector<ResidentModel> view = residency_view(Clock::now(), -1);
      for (size_t i = 0; i < view.size(); ++i) view[i].pinned = models_[i]->pinned();
      for (size_t i : ModelResidency::expired(view, *options_.keep_alive_s)) {
        models_[i]->unload_if_idle("keep_alive");
      }
    }
    loaded_one = to_load && to_load->state() == ModelState::loaded;
    lock.lock();
  }
}

void ModelRegistry::shutdown_all(std::chrono::milliseconds drain_timeout) {
  std::vector<Waiter> waiting;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    waiting.swap(waiters_);
  }
  wake_.notify_all();
  if (residency_thread_.joinable()) residency_thread_.join();
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  error.code = "shutting_down";
  error.message = "the server is shutting down";
  for (Waiter& waiter : waiting) waiter.then(error);
  std::vector<std::thread> drains;
  for (const auto& model : models_) {
    drains.emplace_back([&model, drain_timeout] { model->shutdown(drain_timeout); });
  }
  for (auto& drain : drains) drain.join();
}

std::string ModelRegistry::render_prometheus() const {
  uint64_t loaded = 0;
  for (const auto& model : models_) {
    if (model->state() != ModelState::unloaded) loaded += model->memory_bytes();
  }
  return fmt::format(
      "# HELP brisk_memory_budget_bytes --memory-budget: what the loaded models may take.\n"
      "# TYPE brisk_memory_budget_bytes gauge\n"
      "brisk_memory_budget_bytes {}\n"
      "# HELP brisk_memory_loaded_bytes What the loaded (and loading) models take of the budget.\n"
      "# TYPE brisk_memory_loaded_bytes gauge\n"
      "brisk_memory_loaded_bytes {}\n",
      options_.memory_budget_bytes, loaded);
}

std::string format_bytes(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  if (mib < 1024) return fmt::format("{:.0f} MiB", mib);
  return fmt::format("{:.1f} GiB", mib / 1024);
}

std::optional<std::string> requested_model_name(std::string_view body) {
  ModelFieldReader reader;
  nlohmann::json::sax_parse(body.begin(), body.end(), &reader, nlohmann::json::input_format_t::json,
                            /*strict=*/false);
  return reader.model;
}

}  // namespace brisk
