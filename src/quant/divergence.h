#pragma once

#include <cstddef>
#include <vector>

#include "engine/token.h"

namespace brisk::quant {

// How a candidate's next-token distribution differs from the reference's at one position.
struct TokenDivergence {
  double kld = 0;            // KL(reference || candidate), nats, over the whole vocabulary
  bool same_top = false;     // both put their highest logit on the same token
  double reference_nll = 0;  // -log p_reference(actual next token)
  double candidate_nll = 0;  // -log p_candidate(actual next token)
};

// Exact, in double precision: KL = sum_i p_ref(i) * (log p_ref(i) - log p_cand(i)), with both
// log-softmaxes taken from raw logits. llama-perplexity computes the same sum but from reference
// log-probabilities stored as 16-bit integers and skips terms with log p_ref <= -16
// (docs/quant.md). Identical logits give exactly 0.
TokenDivergence compare_next_token(const float* reference_logits, const float* candidate_logits,
                                   int n_vocab, Token actual_next);

// The figures llama-perplexity --kl-divergence prints, over all scored positions.
struct DivergenceSummary {
  size_t tokens = 0;
  double kld_mean = 0;
  double kld_median = 0;  // the middle value, or the mean of the two middle ones
  double kld_p99 = 0;     // linear between closest ranks, as llama-perplexity's percentile
  double kld_max = 0;
  double same_top = 0;  // fraction in [0, 1]
  double reference_ppl = 0;
  double candidate_ppl = 0;
  double ppl_ratio = 0;  // exp(mean candidate NLL - mean reference NLL): PPL(Q)/PPL(base)
};

// Accumulates per-token results; summary() may be called at any time.
class DivergenceAccumulator {
 public:
  void add(const TokenDivergence& token);
  DivergenceSummary summary() const;
  size_t size() const { return klds_.size(); }

 private:
  std::vector<double> klds_;
  size_t same_top_ = 0;
  double reference_nll_sum_ = 0;
  double candidate_nll_sum_ = 0;
};

}  // namespace brisk::quant
