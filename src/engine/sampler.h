#pragma once

#include <cstdint>
#include <optional>

#include "engine/token.h"

struct llama_sampler;
struct llama_context;

namespace brisk {

// OpenAI/vLLM defaults: plain sampling from the full distribution unless asked otherwise.
struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 = off
  float min_p = 0.0f;
  std::optional<uint32_t> seed;
};

// One llama.cpp sampler chain per sequence (it holds per-sequence RNG state).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Samples from the logits of batch position `batch_index` of the last decode.
  Token sample(llama_context* context, int batch_index, int vocabulary_size);

 private:
  // Greedy decoding scans the logits directly: the generic chain first copies the whole
  // vocabulary (262k entries for Gemma) into a candidate array, about a millisecond per token.
  bool greedy_ = false;
  llama_sampler* chain_ = nullptr;
};

}  // namespace brisk
