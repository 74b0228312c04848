#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/divergence.h"

namespace brisk::quant {
namespace {

std::vector<float> logits_of(const std::vector<double>& probabilities, double shift = 0) {
  std::vector<float> logits;
  for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p) + shift));
  return logits;
}

TEST(QuantDivergence, KlOfHandMadeDistributionsMatchesTheFormula) {
  // KL(p||q) = 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.5) + 0.25 ln 1 = 0.25 ln 2.
  const auto p = logits_of({0.5, 0.25, 0.25});
  const auto q = logits_of({0.25, 0.5, 0.25}, 3.0);  // a shift of all logits changes nothing
  const TokenDivergence d = compare_next_token(p.data(), q.data(), 3, 2);
  EXPECT_NEAR(d.kld, 0.25 * std::log(2.0), 1e-6);
  EXPECT_FALSE(d.same_top);
  EXPECT_NEAR(d.reference_nll, -std::log(0.25), 1e-6);
  EXPECT_NEAR(d.candidate_nll, -std::log(0.25), 1e-6);
}

TEST(QuantDivergence, KlIsNotSymmetric) {
  const auto p = logits_of({0.9, 0.05, 0.05});
  const auto q = logits_of({0.4, 0.3, 0.3});
  const double forward = compare_next_token(p.data(), q.data(), 3, 0).kld;
  const double backward = compare_next_token(q.data(), p.data(), 3, 0).kld;
  EXPECT_NEAR(forward, 0.9 * std::log(0.9 / 0.4) + 0.1 * std::log(0.05 / 0.3), 1e-6);
  EXPECT_GT(std::fabs(forward - backward), 0.01);
}

TEST(QuantDivergence, IdenticalLogitsGiveExactlyZero) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 7.0f;
  const TokenDivergence d = compare_next_token(logits.data(), logits.data(), 1000, 5);
  EXPECT_EQ(d.kld, 0.0);
  EXPECT_TRUE(d.same_top);
  EXPECT_EQ(d.reference_nll, d.candidate_nll);
}

TEST(QuantDivergence, SummaryUsesLlamaPerplexityDefinitions) {
  DivergenceAccumulator accumulator;
  // KLDs 0.0, 0.1, ..., 0.9; same top on the first 7; NLLs chosen for a known ratio.
  for (int i = 0; i < 10; ++i) {
    TokenDivergence token;
    token.kld = 0.1 * i;
    token.same_top = i < 7;
    token.reference_nll = 1.0;
    token.candidate_nll = 1.5;
    accumulator.add(token);
  }
  const DivergenceSummary summary = accumulator.summary();
  EXPECT_EQ(summary.tokens, 10u);
  EXPECT_NEAR(summary.kld_mean, 0.45, 1e-12);
  EXPECT_NEAR(summary.kld_median, 0.45, 1e-12);           // mean of the two middle values
  EXPECT_NEAR(summary.kld_p99, 0.8 + 0.91 * 0.1, 1e-12);  // rank 0.99 * 9 = 8.91
  EXPECT_NEAR(summary.kld_max, 0.9, 1e-12);
  EXPECT_NEAR(summary.same_top, 0.7, 1e-12);
  EXPECT_NEAR(summary.reference_ppl, std::exp(1.0), 1e-9);
  EXPECT_NEAR(summary.ppl_ratio, std::exp(0.5), 1e-9);
}

TEST(QuantDivergence, EmptySummaryIsZero) {
  const DivergenceSummary summary = DivergenceAccumulator().summary();
  EXPECT_EQ(summary.tokens, 0u);
  EXPECT_EQ(summary.kld_mean, 0.0);
}

}  // namespace
}  // namespace brisk::quant
