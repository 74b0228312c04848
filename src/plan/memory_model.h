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

}  // namespace brisk::plan
