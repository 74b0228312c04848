#include "server/model_registry.h"

#include <fmt/format.h>

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

void ModelRegistry::start_all() {
  if (several()) {
    // One device for all (CPU cores, or the one GPU): one model's step at a time.
    arbiter_ = std::make_unique<DeviceArbiter>();
    for (const auto& model : models_) model->share_device(*arbiter_);
  }
  for (const auto& model : models_) model->start();
}

void ModelRegistry::shutdown_all(std::chrono::milliseconds drain_timeout) {
  std::vector<std::thread> drains;
  for (const auto& model : models_) {
    drains.emplace_back([&model, drain_timeout] { model->shutdown(drain_timeout); });
  }
  for (auto& drain : drains) drain.join();
}

std::optional<std::string> requested_model_name(std::string_view body) {
  ModelFieldReader reader;
  nlohmann::json::sax_parse(body.begin(), body.end(), &reader, nlohmann::json::input_format_t::json,
                            /*strict=*/false);
  return reader.model;
}

}  // namespace brisk
