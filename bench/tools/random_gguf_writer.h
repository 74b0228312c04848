// Streams a GGUF file whose tensors hold deterministic random values: the header with every
// tensor's info first, then each tensor's data generated and encoded a few rows at a time, so
// memory stays small whatever the model's size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "gguf.h"
#include "llama_shape.h"

namespace random_gguf {

struct WriteOptions {
  uint64_t seed = 0;
  unsigned threads = 1;
  float weight_stddev = 0.02f;
};

struct WriteResult {
  uint64_t file_bytes = 0;
  double elapsed_s = 0.0;
};

// `metadata` holds the key/values only; the planned tensors are added to it here. Throws
// std::runtime_error with a message naming what to change; a partly written file is removed.
WriteResult write_random_gguf(gguf_context* metadata, const std::vector<PlannedTensor>& tensors,
                              const LlamaShape& shape, const std::filesystem::path& out_path,
                              const WriteOptions& options);

// Normal-ish values (Irwin-Hall sum of four bytes) with mean 0 and the given standard deviation;
// the same (seed, count) always gives the same values.
void fill_random_normal(float* values, int64_t count, uint64_t seed, float stddev);

}  // namespace random_gguf
