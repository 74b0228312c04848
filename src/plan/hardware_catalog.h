#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::plan {

// One accelerator (or CPU) as its vendor publishes it. Rates are dense (never "with sparsity").
struct DeviceSpec {
  std::string id;  // what users type: --devices h100-sxm
  std::string name;
  std::string kind;  // "gpu" or "cpu"
  double memory_gb = 0;
  double memory_bandwidth_gb_s = 0;
  double fp16_tflops = 0;
  double bf16_tflops = 0;
  double fp8_tflops = 0;
  double int8_tops = 0;
  std::string interconnect;
  double interconnect_gb_s = 0;  // per device, per direction
  int max_per_node = 1;
  double usd_per_hour = 0;
  std::string spec_source;
  std::string price_source;
  std::string notes;

  bool is_gpu() const { return kind == "gpu"; }
};

// data/hardware.toml, compiled into the binary; `--catalog FILE` reads an edited copy instead.
class HardwareCatalog {
 public:
  // Parses TOML text; nullopt with `error` naming the entry and key at fault.
  static std::optional<HardwareCatalog> parse(std::string_view toml_text, std::string_view origin,
                                              std::string* error);
  static std::optional<HardwareCatalog> load(const std::string& path_or_empty, std::string* error);

  const std::vector<DeviceSpec>& devices() const { return devices_; }
  const DeviceSpec* find(std::string_view id) const;
  // "h100-sxm, h200, ..." for messages that list the choices.
  std::string ids() const;

 private:
  std::vector<DeviceSpec> devices_;
};

}  // namespace brisk::plan
