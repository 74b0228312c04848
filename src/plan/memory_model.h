#pragma once

#include "plan/performance_model.h"

namespace brisk::plan {

// Memory of one device in a deployment, in GB (1e9 bytes, as vendors state capacity).
struct MemoryBreakdown {
  double weights_gb = 0;
  double kv_cache_gb = 0;
  double activations_gb = 0;
  double runtime_gb = 0;  // CUDA context, cuBLAS workspace, graphs; allocator slack on a CPU
  double total_gb = 0;
  double capacity_gb = 0;  // device memory
  double usable_gb = 0;    // capacity less the headroom rule
  bool fits = false;
  // Sequences of `sequence_tokens` whose KV fits beside the weights within `usable_gb`.
  int max_sequences = 0;
};

// `sequences` requests of `sequence_tokens` (prompt + completion) each resident at once.
MemoryBreakdown memory_for(const Deployment& deployment, double sequences, int sequence_tokens,
                           double headroom);

// How brisk serve runs one model, as far as its memory goes.
struct ServingShape {
  int kv_cells = 0;      // --ctx-size (0: an embedding model, which keeps no KV cache)
  int max_seqs = 1;      // --max-seqs
  bool kv_unified = true;
  double kv_bytes_per_element = 2;  // kv_cache_type_bytes(--cache-type-k/v)
  int step_tokens = 512;            // --max-batched-tokens (an embedding batch's tokens)
  uint64_t host_cache_bytes = 0;    // the prefix cache's host tier (--cache-ram)
};

// What one served model takes of brisk serve's --memory-budget, in bytes (docs/models.md).
struct ServingMemory {
  uint64_t weights = 0;
  uint64_t kv_cache = 0;
  uint64_t compute = 0;  // one step's activations and logits, and the runtime's own
  uint64_t host_cache = 0;
  uint64_t total() const { return weights + kv_cache + compute + host_cache; }
};
ServingMemory serving_memory(const ModelProfile& model, const ServingShape& shape);

// Bytes per element of a KV cache type ("f16", "q8_0", ...); 2 for a name it does not know.
double kv_cache_type_bytes(const std::string& type);

}  // namespace brisk::plan
