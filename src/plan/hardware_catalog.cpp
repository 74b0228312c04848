#include "plan/hardware_catalog.h"

#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "plan/embedded_data.h"

namespace brisk::plan {
namespace {

// More than any server holds (a DGX SuperPOD node has 8 GPUs, NVL72 racks 72).
constexpr int64_t kMaxDevicesPerNode = 1024;

// Reads one entry's keys, remembering the first missing or mistyped one for the error message.
class EntryReader {
 public:
  EntryReader(const toml::table& table, std::string where) : table_(table), where_(where) {}

  std::string text(const char* key, bool required = true) {
    if (const auto value = table_[key].value<std::string>()) return *value;
    if (required) fail(key, "a string");
    return {};
  }
  // TOML has inf and nan; a plan computed from them is garbage, so they are refused.
  double number(const char* key) {
    if (const auto value = table_[key].value<double>(); value && std::isfinite(*value)) {
      return *value;
    }
    fail(key, "a finite number");
    return 0;
  }
  // Only a TOML integer: converting a float such as 1e300 to an integer type is undefined (and
  // toml++'s value<int64_t>() does so unchecked).
  int integer(const char* key, int64_t min, int64_t max) {
    const toml::value<int64_t>* value = table_[key].as_integer();
    if (value != nullptr && value->get() >= min && value->get() <= max) {
      return static_cast<int>(value->get());
    }
    fail(key, ("an integer from " + std::to_string(min) + " to " + std::to_string(max)).c_str());
    return 0;
  }
  const std::string& error() const { return error_; }

 private:
  void fail(const char* key, const std::string& expected) {
    if (error_.empty()) error_ = where_ + ": key '" + key + "' must be " + expected;
  }
  const toml::table& table_;
  std::string where_;
  std::string error_;
};

}  // namespace

std::optional<HardwareCatalog> HardwareCatalog::parse(std::string_view toml_text,
                                                      std::string_view origin, std::string* error) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& failure) {
    std::ostringstream message;
    message << origin << ": " << failure.description() << " (line " << failure.source().begin.line
            << ")";
    *error = message.str();
    return std::nullopt;
  }
  const toml::array* entries = root["device"].as_array();
  if (entries == nullptr || entries->empty()) {
    *error = std::string(origin) + ": no [[device]] entries";
    return std::nullopt;
  }
  HardwareCatalog catalog;
  for (const toml::node& node : *entries) {
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      *error = std::string(origin) + " device #" + std::to_string(catalog.devices_.size() + 1) +
               ": is not a table; write each device as a [[device]] section";
      return std::nullopt;
    }
    EntryReader read(
        *table, std::string(origin) + " device #" + std::to_string(catalog.devices_.size() + 1));
    DeviceSpec device;
    device.id = read.text("id");
    device.name = read.text("name");
    device.kind = read.text("kind");
    device.memory_gb = read.number("memory_gb");
    device.memory_bandwidth_gb_s = read.number("memory_bandwidth_gb_s");
    device.fp16_tflops = read.number("fp16_tflops");
    device.bf16_tflops = read.number("bf16_tflops");
    device.fp8_tflops = read.number("fp8_tflops");
    device.int8_tops = read.number("int8_tops");
    device.interconnect = read.text("interconnect");
    device.interconnect_gb_s = read.number("interconnect_gb_s");
    device.max_per_node = read.integer("max_per_node", 1, kMaxDevicesPerNode);
    device.usd_per_hour = read.number("usd_per_hour");
    device.spec_source = read.text("spec_source");
    device.price_source = read.text("price_source");
    device.notes = read.text("notes", /*required=*/false);
    if (!read.error().empty()) {
      *error = read.error();
      return std::nullopt;
    }
    const std::string where = std::string(origin) + " device '" + device.id + "'";
    if (device.kind != "gpu" && device.kind != "cpu") {
      *error = where + ": kind must be \"gpu\" or \"cpu\"";
      return std::nullopt;
    }
    if (device.memory_gb <= 0 || device.memory_bandwidth_gb_s <= 0 || device.fp16_tflops <= 0 ||
        device.max_per_node < 1 || device.usd_per_hour < 0) {
      *error = where +
               ": memory_gb, memory_bandwidth_gb_s, fp16_tflops and max_per_node must be "
               "positive, usd_per_hour not negative";
      return std::nullopt;
    }
    if (device.spec_source.empty() || device.price_source.empty()) {
      *error = where + ": every number needs a source (spec_source and price_source)";
      return std::nullopt;
    }
    if (catalog.find(device.id) != nullptr) {
      *error = where + ": id appears twice";
      return std::nullopt;
    }
    catalog.devices_.push_back(std::move(device));
  }
  return catalog;
}

std::optional<HardwareCatalog> HardwareCatalog::load(const std::string& path_or_empty,
                                                     std::string* error) {
  if (path_or_empty.empty()) {
    return parse(embedded_hardware_toml(), "data/hardware.toml (built in)", error);
  }
  std::ifstream file(path_or_empty);
  if (!file) {
    *error = "cannot read hardware catalog '" + path_or_empty + "'";
    return std::nullopt;
  }
  std::ostringstream text;
  text << file.rdbuf();
  return parse(text.str(), path_or_empty, error);
}

const DeviceSpec* HardwareCatalog::find(std::string_view id) const {
  for (const DeviceSpec& device : devices_) {
    if (device.id == id) return &device;
  }
  return nullptr;
}

std::string HardwareCatalog::ids() const {
  std::string joined;
  for (const DeviceSpec& device : devices_) {
    if (!joined.empty()) joined += ", ";
    joined += device.id;
  }
  return joined;
}

}  // namespace brisk::plan
