#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace brisk::plan {

struct DeviceSpec;

// How weights are stored, and so which of a device's rates their matrix products run at.
struct Precision {
  std::string name;          // f16, bf16, fp8, int8, q8_0, q4_k_m, int4
  double bytes_per_weight;   // average, block scales included
  std::string compute_rate;  // which DeviceSpec rate: "fp16", "bf16", "fp8" or "int8"

  // The dense rate (TFLOP/s) this precision's matrix products can use on `device`, falling back
  // to FP16 where the device lacks the faster unit (e.g. FP8 on an A100).
  double dense_tflops(const DeviceSpec& device) const;
};

// Parses a --precision name (case-insensitive; "int4" also accepts "awq", "q4" means q4_k_m).
std::optional<Precision> parse_precision(std::string_view name);
// "f16, bf16, ..." for messages.
std::string precision_names();
// Bytes per element of a --kv-precision (f16, bf16, fp8, q8_0), block scales included: q8_0 is
// 34 bytes per 32 (llama.cpp's --cache-type-k/-v q8_0). nullopt for any other name.
std::optional<double> kv_cache_bytes_per_element(std::string_view name);

// The precision a GGUF's dominant tensor type corresponds to (e.g. "q4_K" -> q4_k_m).
Precision precision_of_gguf_type(std::string_view ggml_type_name, double bytes_per_weight);

}  // namespace brisk::plan
