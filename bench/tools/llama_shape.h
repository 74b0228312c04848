// The shape of a Llama-architecture model (hyperparameters, tensor names, sizes and storage types)
// as llama.cpp's "llama" architecture loads it, independent of any weight values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ggml.h"

namespace random_gguf {

struct LlamaShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_tokens = 8192;
  float rope_theta = 500000.0f;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;
  // Llama 3.x "llama3" RoPE scaling; 0 means none (no rope_freqs.weight tensor).
  float rope_scaling_factor = 0.0f;
  int64_t rope_original_context_tokens = 8192;
};

// Named presets of real models; returns nullopt for an unknown name.
std::optional<LlamaShape> find_preset_shape(const std::string& name);
std::vector<std::string> preset_shape_names();

// Throws std::invalid_argument naming the option to change when the shape cannot be loaded.
void validate_shape(const LlamaShape& shape);

enum class WeightType { kF16, kBF16, kQ8_0, kQ4_K_M };

// llama.cpp's llama_ftype value for general.file_type.
uint32_t llama_file_type(WeightType weight_type);

enum class TensorFill { kRandomNormal, kOnes, kRopeFreqFactors };

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
  ggml_type type = GGML_TYPE_F32;
  TensorFill fill = TensorFill::kRandomNormal;
};

// Every tensor llama.cpp's llama architecture loads for this shape, with the storage type
// llama-quantize would choose for `weight_type` (1-D tensors stay F32).
std::vector<PlannedTensor> plan_llama_tensors(const LlamaShape& shape, WeightType weight_type);

// Llama 3.x rope_freqs.weight values (head_dim / 2 entries), as convert_hf_to_gguf.py computes
// them.
std::vector<float> llama3_rope_freq_factors(const LlamaShape& shape);

}  // namespace random_gguf
