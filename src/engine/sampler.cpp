#include "engine/sampler.h"

#include <random>

#include "llama.h"

namespace brisk {

Sampler::Sampler(const SamplingParams& params) : greedy_(params.temperature <= 0.0f) {
  if (greedy_) return;
  chain_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
  // Same order as llama-server: truncate (top-k, top-p, min-p), then temperature, then draw.
  if (params.top_k > 0) llama_sampler_chain_add(chain_, llama_sampler_init_top_k(params.top_k));
  if (params.top_p < 1.0f)
    llama_sampler_chain_add(chain_, llama_sampler_init_top_p(params.top_p, 1));
  if (params.min_p > 0.0f)
    llama_sampler_chain_add(chain_, llama_sampler_init_min_p(params.min_p, 1));
  llama_sampler_chain_add(chain_, llama_sampler_init_temp(params.temperature));
  const uint32_t seed = params.seed.value_or(std::random_device{}());
  llama_sampler_chain_add(chain_, llama_sampler_init_dist(seed));
}

Sampler::~Sampler() {
  if (chain_ != nullptr) llama_sampler_free(chain_);
}

Token Sampler::sample(llama_context* context, int batch_index, int vocabulary_size) {
  if (greedy_) {
    // The first maximum, as llama.cpp's greedy sampler picks it.
    const float* logits = llama_get_logits_ith(context, batch_index);
    Token best = 0;
    for (Token token = 1; token < vocabulary_size; ++token) {
      if (logits[token] > logits[best]) best = token;
    }
    return best;
  }
  // llama_sampler_sample also accepts the token into the chain's state.
  return llama_sampler_sample(chain_, context, batch_index);
}

}  // namespace brisk
