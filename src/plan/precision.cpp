#include "plan/precision.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "plan/hardware_catalog.h"

namespace brisk::plan {
namespace {

// Bytes per weight, block scales included: Q8_0 stores 32 int8 + one f16 scale (8.5 bits);
// llama.cpp's Q4_K_M mixes Q4_K (4.5 bits) with Q6_K (6.56 bits) for the output and some
// attention/FFN tensors, ~4.85 bits on Llama-class models; INT4 (AWQ/GPTQ, group 128, f16 scale
// and zero) is 4.25 bits. Quantized GGUF products run on int8 units (llama.cpp's MMQ kernels);
// AWQ/GPTQ dequantize to f16.
const std::array<Precision, 7> kPrecisions = {{
    {"f16", 2.0, "fp16"},
    {"bf16", 2.0, "bf16"},
    {"fp8", 1.0, "fp8"},
    {"int8", 1.0, "int8"},
    {"q8_0", 8.5 / 8, "int8"},
    {"q4_k_m", 4.85 / 8, "int8"},
    {"int4", 4.25 / 8, "fp16"},
}};

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

}  // namespace

std::optional<double> kv_cache_bytes_per_element(std::string_view name) {
  const std::string lower = lowercase(name);
  if (lower == "f16" || lower == "bf16") return 2.0;
  if (lower == "fp8") return 1.0;
  if (lower == "f32") return 4.0;
  // llama.cpp's quantized cache types, in blocks of 32 elements with an f16 scale (and an f16
  // minimum for the _1 types): bytes per block over 32.
  if (lower == "q8_0") return 34.0 / 32;
  if (lower == "q5_1") return 24.0 / 32;
  if (lower == "q5_0") return 22.0 / 32;
  if (lower == "q4_1") return 20.0 / 32;
  if (lower == "q4_0" || lower == "iq4_nl") return 18.0 / 32;
  return std::nullopt;
}

double Precision::dense_tflops(const DeviceSpec& device) const {
  double rate = 0;
  if (compute_rate == "bf16") rate = device.bf16_tflops;
  if (compute_rate == "fp8") rate = device.fp8_tflops;
  if (compute_rate == "int8") rate = device.int8_tops;
  return rate > 0 ? rate : device.fp16_tflops;
}

std::optional<Precision> parse_precision(std::string_view name) {
  std::string key = lowercase(name);
  if (key == "fp16") key = "f16";
  if (key == "q4" || key == "q4_k" || key == "int4_gguf") key = "q4_k_m";
  if (key == "awq" || key == "gptq") key = "int4";
  if (key == "w8a8") key = "int8";
  for (const Precision& precision : kPrecisions) {
    if (precision.name == key) return precision;
  }
  return std::nullopt;
}

std::string precision_names() {
  std::string names;
  for (const Precision& precision : kPrecisions) {
    if (!names.empty()) names += ", ";
    names += precision.name;
  }
  return names;
}

Precision precision_of_gguf_type(std::string_view ggml_type_name, double bytes_per_weight) {
  const std::string type = lowercase(ggml_type_name);
  Precision precision{"gguf " + std::string(ggml_type_name), bytes_per_weight, "int8"};
  if (type == "f16" || type == "f32") precision.compute_rate = "fp16";
  if (type == "bf16") precision.compute_rate = "bf16";
  return precision;
}

}  // namespace brisk::plan
