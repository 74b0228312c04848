// Fuzzes brisk plan's hardware catalog reader (HardwareCatalog::parse, what `--catalog FILE`
// gets). A catalog it accepts must hold only devices the planner can compute with: a known
// kind, positive finite sizes and rates, a sane device count, sources and unique ids.
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "plan/hardware_catalog.h"

namespace {

using brisk::plan::DeviceSpec;
using brisk::plan::HardwareCatalog;

void require(bool condition) {
  if (!condition) std::abort();
}

bool positive(double value) { return std::isfinite(value) && value > 0; }
bool not_negative(double value) { return std::isfinite(value) && value >= 0; }

void check_device(const DeviceSpec& device, const HardwareCatalog& catalog) {
  require(device.kind == "gpu" || device.kind == "cpu");
  require(positive(device.memory_gb) && positive(device.memory_bandwidth_gb_s) &&
          positive(device.fp16_tflops));
  require(not_negative(device.bf16_tflops) && not_negative(device.fp8_tflops) &&
          not_negative(device.int8_tops) && not_negative(device.interconnect_gb_s) &&
          not_negative(device.usd_per_hour));
  require(device.max_per_node >= 1);
  require(!device.spec_source.empty() && !device.price_source.empty());
  require(catalog.find(device.id) == &device);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string error;
  const auto catalog = HardwareCatalog::parse(text, "fuzz.toml", &error);
  if (!catalog) {
    require(!error.empty());
    return 0;
  }
  require(!catalog->devices().empty());
  for (const DeviceSpec& device : catalog->devices()) check_device(device, *catalog);
  require(!catalog->ids().empty());
  return 0;
}
