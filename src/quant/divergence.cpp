#include "quant/divergence.h"

#include <algorithm>
#include <cmath>

#include "common/percentile.h"

namespace brisk::quant {
namespace {

struct LogSoftmax {
  double max_logit = 0;
  double log_sum_exp = 0;  // log sum_i exp(logit_i - max_logit)
  int top = 0;
};

LogSoftmax log_softmax_of(const float* logits, int n_vocab) {
  LogSoftmax result;
  result.top = static_cast<int>(std::max_element(logits, logits + n_vocab) - logits);
  result.max_logit = logits[result.top];
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i)
    sum += std::exp(static_cast<double>(logits[i]) - result.max_logit);
  result.log_sum_exp = std::log(sum);
  return result;
}

}  // namespace

TokenDivergence compare_next_token(const float* reference_logits, const float* candidate_logits,
                                   int n_vocab, Token actual_next) {
  const LogSoftmax reference = log_softmax_of(reference_logits, n_vocab);
  const LogSoftmax candidate = log_softmax_of(candidate_logits, n_vocab);
  const double reference_norm = reference.max_logit + reference.log_sum_exp;
  const double candidate_norm = candidate.max_logit + candidate.log_sum_exp;
  double kld = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double log_p = static_cast<double>(reference_logits[i]) - reference_norm;
    const double log_q = static_cast<double>(candidate_logits[i]) - candidate_norm;
    kld += std::exp(log_p) * (log_p - log_q);
  }
  TokenDivergence result;
  // Rounding can leave a tiny negative sum for near-identical distributions; KL is never below 0.
  result.kld = std::max(0.0, kld);
  result.same_top = reference.top == candidate.top;
  result.reference_nll = reference_norm - reference_logits[actual_next];
  result.candidate_nll = candidate_norm - candidate_logits[actual_next];
  return result;
}

void DivergenceAccumulator::add(const TokenDivergence& token) {
  klds_.push_back(token.kld);
  same_top_ += token.same_top ? 1 : 0;
  reference_nll_sum_ += token.reference_nll;
  candidate_nll_sum_ += token.candidate_nll;
}

DivergenceSummary DivergenceAccumulator::summary() const {
  DivergenceSummary summary;
  summary.tokens = klds_.size();
  if (klds_.empty()) return summary;
  std::vector<double> sorted = klds_;
  std::sort(sorted.begin(), sorted.end());
  const double count = static_cast<double>(sorted.size());
  double sum = 0;
  for (double kld : sorted) sum += kld;
  summary.kld_mean = sum / count;
  summary.kld_median = percentile_linear(sorted, 50);
  summary.kld_p99 = percentile_linear(sorted, 99);
  summary.kld_max = sorted.back();
  summary.same_top = static_cast<double>(same_top_) / count;
  summary.reference_ppl = std::exp(reference_nll_sum_ / count);
  summary.candidate_ppl = std::exp(candidate_nll_sum_ / count);
  summary.ppl_ratio = std::exp((candidate_nll_sum_ - reference_nll_sum_) / count);
  return summary;
}

}  // namespace brisk::quant
