#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "engine/logit_kernels.h"
#include "engine/token.h"

namespace brisk {

// What a request may ask for; the server fills what it leaves out from its defaults
// (docs/cli.md, --generation-config). The values here are OpenAI's: the full distribution.
struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 = off
  float min_p = 0.0f;
  std::optional<uint32_t> seed;
};

struct TokenLogprob {
  Token token;
  float logprob;
};

struct SampledToken {
  Token token = 0;
  // The model's own log-probability of the token (log-softmax of the raw logits, before
  // temperature and truncation, as vLLM's and llama-server's logprobs are); set on request.
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;  // the most likely tokens, most likely first
};

// Draws from the distribution llama.cpp's sampler chain top-k -> top-p -> min-p -> temperature
// -> dist defines (llama-server's order), in a few vectorized passes over the logits and
// without copying the vocabulary. One per sequence: it holds the sequence's random state, so a
// given seed reproduces its draws. Independent samplers may run on different threads.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits` holds one entry per vocabulary token. top_logprobs < 0 computes no logprobs, 0 the
  // chosen token's, N also the N most likely tokens'.
  SampledToken sample(const float* logits, int vocabulary_size, int top_logprobs = -1);

  const SamplingParams& params() const { return params_; }

 private:
  bool truncates() const;
  // Draws among the tokens whose logit is at least `floor` (-infinity: all of them).
  Token draw_from_full_distribution(const float* logits, int count, float max, float floor);
  Token draw_from_truncated(const float* logits, int count, float max);
  float top_p_logit_cut(const float* logits, int count, float max);
  size_t top_p_cut(double mass) const;
  size_t min_p_cut(size_t size) const;
  Token draw_from_candidates(size_t size);
  double log_normalizer(const float* logits, int count, float max);

  SamplingParams params_;
  std::mt19937 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  // Scratch reused between draws (no allocation per token once warm).
  std::vector<double> block_sums_;
  std::vector<float> block_terms_;
  std::vector<double> mass_buckets_;
  std::vector<TokenLogit> candidates_;
  std::vector<TokenLogit> top_logprob_candidates_;
  // log(sum(exp(logit - max))) at temperature 1, when this draw already computed it.
  std::optional<double> log_sum_at_unit_temperature_;
};

}  // namespace brisk
