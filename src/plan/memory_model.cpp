#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>

namespace brisk::plan {

MemoryBreakdown memory_for(const Deployment& deployment, double sequences, int sequence_tokens,
                           double headroom) {
  const ModelProfile& model = deployment.model;
  const double devices = deployment.devices;
  const double kv_split = std::min<double>(devices, model.kv_heads);
  MemoryBreakdown memory;
  memory.weights_gb = static_cast<double>(model.weight_bytes(deployment.precision)) / devices / 1e9;
  const double kv_per_sequence_gb =
      model.kv_bytes(sequence_tokens, deployment.kv_bytes_per_element) / kv_split / 1e9;
  memory.kv_cache_gb = sequences * kv_per_sequence_gb;
  // One step's hidden states and MLP intermediates (f32) plus the logits of its sequences.
  const double step_tokens = deployment.step_token_budget;
  const double activation_bytes =
      step_tokens * (4.0 * model.hidden_size + 3.0 * model.intermediate_size) * 4 / devices +
      std::max(1.0, sequences) * model.vocab_size * 4.0;
  memory.activations_gb = activation_bytes / 1e9;
  memory.runtime_gb = deployment.device->is_gpu() ? 1.0 : 0.2;
  memory.total_gb =
      memory.weights_gb + memory.kv_cache_gb + memory.activations_gb + memory.runtime_gb;
  memory.capacity_gb = deployment.device->memory_gb;
  memory.usable_gb = memory.capacity_gb * (1 - headroom);
  memory.fits = memory.total_gb <= memory.usable_gb;
  const double free_for_kv_gb =
      memory.usable_gb - memory.weights_gb - memory.activations_gb - memory.runtime_gb;
  memory.max_sequences =
      free_for_kv_gb > 0 && kv_per_sequence_gb > 0
          ? static_cast<int>(std::min(1e9, std::floor(free_for_kv_gb / kv_per_sequence_gb)))
          : 0;
  return memory;
}

ServingMemory serving_memory(const ModelProfile& model, const ServingShape& shape) {
  ServingMemory memory;
  memory.weights = model.stored_weight_bytes > 0
                       ? model.stored_weight_bytes
                       : model.weight_bytes(model.stored_precision.value_or(Precision{"f16", 2, "fp16"}));
  if (shape.kv_cells > 0) {
    // One buffer holds every cell; a buffer per sequence holds its share. A windowed layer keeps
    // at most its window per sequence either way.
    const int seqs = std::max(1, shape.max_seqs);
    const double per_sequence_cells =
        shape.kv_unified ? shape.kv_cells : static_cast<double>(shape.kv_cells) / seqs;
    const double bytes = shape.kv_unified
                             ? model.kv_bytes(per_sequence_cells, shape.kv_bytes_per_element)
                             : seqs * model.kv_bytes(per_sequence_cells, shape.kv_bytes_per_element);
    memory.kv_cache = static_cast<uint64_t>(bytes);
  }
  // As memory_for: a step's hidden states and MLP intermediates (f32), the logits of its
  // outputs, and the runtime's allocator slack.
  const double step_tokens = std::max(1, shape.step_tokens);
  const double outputs = shape.kv_cells > 0 ? std::max(1, shape.max_seqs) : 0;
  memory.compute = static_cast<uint64_t>(
      step_tokens * (4.0 * model.hidden_size + 3.0 * model.intermediate_size) * 4 +
      outputs * model.vocab_size * 4.0 + 64e6);
  memory.host_cache = shape.host_cache_bytes;
  return memory;
}

double kv_cache_type_bytes(const std::string& type) {
  // ggml's block sizes: 32 elements per block of a 2-byte scale and the quants.
  if (type == "f32") return 4;
  if (type == "q8_0") return 34.0 / 32;
  if (type == "q5_1") return 24.0 / 32;
  if (type == "q5_0") return 22.0 / 32;
  if (type == "q4_1") return 20.0 / 32;
  if (type == "q4_0" || type == "iq4_nl") return 18.0 / 32;
  return 2;  // f16, bf16
}

}  // namespace brisk::plan
