#include "llama_shape.h"

#include <cmath>
#include <map>
#include <numbers>
#include <stdexcept>

#include "llama.h"

namespace random_gguf {
namespace {

LlamaShape llama3_shape(int64_t layers, int64_t hidden, int64_t intermediate, int64_t heads,
                        int64_t head_dim, bool tied_embeddings, float rope_scaling_factor) {
  LlamaShape shape;
  shape.layers = layers;
  shape.hidden = hidden;
  shape.intermediate = intermediate;
  shape.heads = heads;
  shape.kv_heads = 8;
  shape.head_dim = head_dim;
  shape.vocab_size = 128256;
  shape.context_tokens = 131072;
  shape.rope_theta = 500000.0f;
  shape.rms_norm_eps = 1e-5f;
  shape.tied_embeddings = tied_embeddings;
  shape.rope_scaling_factor = rope_scaling_factor;
  shape.rope_original_context_tokens = 8192;
  return shape;
}

// Numbers from each model's Hugging Face config.json.
const std::map<std::string, LlamaShape>& preset_shapes() {
  static const std::map<std::string, LlamaShape> presets = {
      {"llama-3.2-1b", llama3_shape(16, 2048, 8192, 32, 64, true, 32.0f)},
      {"llama-3.2-3b", llama3_shape(28, 3072, 8192, 24, 128, true, 32.0f)},
      {"llama-3.1-8b", llama3_shape(32, 4096, 14336, 32, 128, false, 8.0f)},
      {"llama-3.1-70b", llama3_shape(80, 8192, 28672, 64, 128, false, 8.0f)},
  };
  return presets;
}

// llama-quantize's rule for which layers of a Q4_K_M model keep more bits in attn_v and ffn_down.
bool uses_more_bits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// As llama-quantize does: a row length that is not a whole number of blocks gets a smaller-block
// type of similar size, and F16 when even that does not fit.
ggml_type fit_type_to_row(ggml_type wanted, int64_t row_length) {
  if (row_length % ggml_blck_size(wanted) == 0) return wanted;
  ggml_type fallback = GGML_TYPE_F16;
  if (wanted == GGML_TYPE_Q4_K) fallback = GGML_TYPE_Q5_0;
  if (wanted == GGML_TYPE_Q6_K) fallback = GGML_TYPE_Q8_0;
  if (row_length % ggml_blck_size(fallback) != 0) fallback = GGML_TYPE_F16;
  return fallback;
}

enum class MatrixRole { kTokenEmbedding, kOutput, kAttnV, kFfnDown, kOther };

ggml_type matrix_type(WeightType weight_type, MatrixRole role, int64_t layer, int64_t layers) {
  switch (weight_type) {
    case WeightType::kF16:
      return GGML_TYPE_F16;
    case WeightType::kBF16:
      return GGML_TYPE_BF16;
    case WeightType::kQ8_0:
      return GGML_TYPE_Q8_0;
    case WeightType::kQ4_K_M:
      if (role == MatrixRole::kOutput) return GGML_TYPE_Q6_K;
      if ((role == MatrixRole::kAttnV || role == MatrixRole::kFfnDown) &&
          uses_more_bits(layer, layers)) {
        return GGML_TYPE_Q6_K;
      }
      return GGML_TYPE_Q4_K;
  }
  throw std::logic_error("unhandled weight type");
}

}  // namespace

std::optional<LlamaShape> find_preset_shape(const std::string& name) {
  auto found = preset_shapes().find(name);
  if (found == preset_shapes().end()) return std::nullopt;
  return found->second;
}

std::vector<std::string> preset_shape_names() {
  std::vector<std::string> names;
  for (const auto& [name, shape] : preset_shapes()) names.push_back(name);
  return names;
}

void validate_shape(const LlamaShape& shape) {
  auto require_positive = [](int64_t value, const char* option) {
    if (value <= 0) {
      throw std::invalid_argument(std::string(option) + " must be positive (got " +
                                  std::to_string(value) + "); set it or pick a --shape");
    }
  };
  require_positive(shape.layers, "--layers");
  require_positive(shape.hidden, "--hidden");
  require_positive(shape.intermediate, "--intermediate");
  require_positive(shape.heads, "--heads");
  require_positive(shape.kv_heads, "--kv-heads");
  require_positive(shape.head_dim, "--head-dim");
  require_positive(shape.vocab_size, "--vocab-size");
  require_positive(shape.context_tokens, "--context");
  if (shape.heads % shape.kv_heads != 0) {
    throw std::invalid_argument("--heads (" + std::to_string(shape.heads) +
                                ") must be a multiple of --kv-heads (" +
                                std::to_string(shape.kv_heads) + ")");
  }
  if (shape.head_dim % 2 != 0) {
    throw std::invalid_argument("--head-dim must be even for RoPE (got " +
                                std::to_string(shape.head_dim) + ")");
  }
}

uint32_t llama_file_type(WeightType weight_type) {
  switch (weight_type) {
    case WeightType::kF16:
      return LLAMA_FTYPE_MOSTLY_F16;
    case WeightType::kBF16:
      return LLAMA_FTYPE_MOSTLY_BF16;
    case WeightType::kQ8_0:
      return LLAMA_FTYPE_MOSTLY_Q8_0;
    case WeightType::kQ4_K_M:
      return LLAMA_FTYPE_MOSTLY_Q4_K_M;
  }
  throw std::logic_error("unhandled weight type");
}

std::vector<PlannedTensor> plan_llama_tensors(const LlamaShape& shape, WeightType weight_type) {
  std::vector<PlannedTensor> tensors;
  auto add_matrix = [&](std::string name, int64_t row_length, int64_t rows, MatrixRole role,
                        int64_t layer) {
    ggml_type type = matrix_type(weight_type, role, layer, shape.layers);
    tensors.push_back({std::move(name),
                       {row_length, rows},
                       fit_type_to_row(type, row_length),
                       TensorFill::kRandomNormal});
  };
  auto add_norm = [&](std::string name) {
    tensors.push_back({std::move(name), {shape.hidden}, GGML_TYPE_F32, TensorFill::kOnes});
  };

  // With tied embeddings token_embd doubles as the output matrix, so it is stored like one.
  add_matrix("token_embd.weight", shape.hidden, shape.vocab_size,
             shape.tied_embeddings ? MatrixRole::kOutput : MatrixRole::kTokenEmbedding, 0);
  if (shape.rope_scaling_factor > 0.0f) {
    tensors.push_back(
        {"rope_freqs.weight", {shape.head_dim / 2}, GGML_TYPE_F32, TensorFill::kRopeFreqFactors});
  }
  const int64_t q_width = shape.heads * shape.head_dim;
  const int64_t kv_width = shape.kv_heads * shape.head_dim;
  for (int64_t layer = 0; layer < shape.layers; ++layer) {
    const std::string prefix = "blk." + std::to_string(layer) + ".";
    add_norm(prefix + "attn_norm.weight");
    add_matrix(prefix + "attn_q.weight", shape.hidden, q_width, MatrixRole::kOther, layer);
    add_matrix(prefix + "attn_k.weight", shape.hidden, kv_width, MatrixRole::kOther, layer);
    add_matrix(prefix + "attn_v.weight", shape.hidden, kv_width, MatrixRole::kAttnV, layer);
    add_matrix(prefix + "attn_output.weight", q_width, shape.hidden, MatrixRole::kOther, layer);
    add_norm(prefix + "ffn_norm.weight");
    add_matrix(prefix + "ffn_gate.weight", shape.hidden, shape.intermediate, MatrixRole::kOther,
               layer);
    add_matrix(prefix + "ffn_up.weight", shape.hidden, shape.intermediate, MatrixRole::kOther,
               layer);
    add_matrix(prefix + "ffn_down.weight", shape.intermediate, shape.hidden, MatrixRole::kFfnDown,
               layer);
  }
  add_norm("output_norm.weight");
  if (!shape.tied_embeddings) {
    add_matrix("output.weight", shape.hidden, shape.vocab_size, MatrixRole::kOutput, 0);
  }
  return tensors;
}

std::vector<float> llama3_rope_freq_factors(const LlamaShape& shape) {
  // Llama 3's published constants: low_freq_factor 1, high_freq_factor 4.
  constexpr double kLowFreqFactor = 1.0;
  constexpr double kHighFreqFactor = 4.0;
  const double factor = shape.rope_scaling_factor;
  const double original_context = static_cast<double>(shape.rope_original_context_tokens);
  const double low_freq_wavelen = original_context / kLowFreqFactor;
  const double high_freq_wavelen = original_context / kHighFreqFactor;
  std::vector<float> factors;
  for (int64_t i = 0; i < shape.head_dim; i += 2) {
    const double freq =
        1.0 / std::pow(static_cast<double>(shape.rope_theta),
                       static_cast<double>(i) / static_cast<double>(shape.head_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(static_cast<float>(factor));
    } else {
      const double smooth =
          (original_context / wavelen - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
      factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return factors;
}

}  // namespace random_gguf
