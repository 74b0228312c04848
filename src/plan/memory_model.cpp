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

}  // namespace brisk::plan
