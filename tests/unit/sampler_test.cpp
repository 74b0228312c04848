// The sampler must draw from exactly the distribution llama.cpp's sampler chain defines. The
// reference distribution comes from llama.cpp itself (its chain applied to the same logits);
// many seeded draws are checked against it with a chi-square test.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "engine/logit_kernels.h"
#include "llama.h"

namespace brisk {
namespace {

// Not a multiple of the vector width nor of the exp block, so every tail path runs.
constexpr int kVocabulary = 5007;

std::vector<float> random_logits(int count, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> logits(static_cast<size_t>(count));
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

// `sampler` applied to a candidate array of `logits`, as llama-server applies it to a row: the
// entries it leaves. The sampler is freed.
std::vector<llama_token_data> apply_and_free(llama_sampler* sampler,
                                             const std::vector<float>& logits) {
  std::vector<llama_token_data> data;
  for (size_t i = 0; i < logits.size(); ++i) {
    data.push_back({static_cast<llama_token>(i), logits[i], 0.0f});
  }
  llama_token_data_array array{data.data(), data.size(), -1, false};
  llama_sampler_apply(sampler, &array);
  llama_sampler_free(sampler);
  return {array.data, array.data + array.size};
}

// Token -> probability under llama.cpp's chain top-k -> typical -> top-p -> min-p -> temperature
// -> dist.
std::map<Token, double> llama_chain_distribution(const std::vector<float>& logits,
                                                 const SamplingParams& params) {
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (params.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(params.top_k));
  if (params.typical_p < 1.0f)
    llama_sampler_chain_add(chain, llama_sampler_init_typical(params.typical_p, 1));
  if (params.top_p < 1.0f)
    llama_sampler_chain_add(chain, llama_sampler_init_top_p(params.top_p, 1));
  if (params.min_p > 0.0f)
    llama_sampler_chain_add(chain, llama_sampler_init_min_p(params.min_p, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(params.temperature));
  const std::vector<llama_token_data> kept = apply_and_free(chain, logits);

  double best = -INFINITY;
  for (const llama_token_data& entry : kept) best = std::max(best, double(entry.logit));
  std::map<Token, double> probability;
  double total = 0;
  for (const llama_token_data& entry : kept) {
    const double weight = std::exp(double(entry.logit) - best);
    probability[entry.id] = weight;
    total += weight;
  }
  for (auto& [token, p] : probability) p /= total;
  return probability;
}

// Upper 1e-6 tail of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi_square_critical(int df) {
  const double z = 4.753;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct ChiSquare {
  double statistic = 0;
  int degrees_of_freedom = 0;
  int draws_outside_support = 0;
};

ChiSquare chi_square(const std::map<Token, double>& expected, const std::vector<int>& observed,
                     int draws) {
  ChiSquare result;
  // Tokens expected fewer than 5 times share one pooled bin, as the test requires.
  double pooled_expected = 0;
  int pooled_observed = 0;
  int bins = 0;
  for (const auto& [token, p] : expected) {
    const double e = p * draws;
    const int o = observed[static_cast<size_t>(token)];
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += o;
      continue;
    }
    result.statistic += (o - e) * (o - e) / e;
    ++bins;
  }
  if (pooled_expected > 0) {
    result.statistic +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  for (size_t token = 0; token < observed.size(); ++token) {
    if (!expected.count(static_cast<Token>(token))) result.draws_outside_support += observed[token];
  }
  result.degrees_of_freedom = std::max(1, bins - 1);
  return result;
}

struct Case {
  const char* name;
  SamplingParams params;
  float spread;  // standard deviation of the logits: how peaked the distribution is
  // A small vocabulary gives every token at a cut enough mass that keeping one too many or one
  // too few shows in the test.
  int vocabulary = kVocabulary;
};

class SamplerDistributionTest : public ::testing::TestWithParam<Case> {};

TEST_P(SamplerDistributionTest, MatchesLlamaCppChain) {
  const Case& c = GetParam();
  const std::vector<float> logits = random_logits(c.vocabulary, c.spread, 7);
  const std::map<Token, double> expected = llama_chain_distribution(logits, c.params);

  SamplingParams params = c.params;
  params.seed = 1234;
  Sampler sampler(params);
  // Under a sanitizer (`make sanitize-unit`, in CI) a draw costs ~10x as much, and what the run
  // checks is the sampler's memory use, not the test's power: a tenth of the draws.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kDraws = 20000;
#else
  constexpr int kDraws = 200000;
#endif
  std::vector<int> observed(size_t(c.vocabulary), 0);
  for (int i = 0; i < kDraws; ++i) {
    ++observed[size_t(sampler.sample(logits.data(), c.vocabulary).token)];
  }

  const ChiSquare test = chi_square(expected, observed, kDraws);
  EXPECT_EQ(test.draws_outside_support, 0) << "drew tokens llama.cpp's chain had removed";
  EXPECT_LT(test.statistic, chi_square_critical(test.degrees_of_freedom))
      << "chi-square " << test.statistic << " with " << test.degrees_of_freedom
      << " degrees of freedom over " << expected.size() << " tokens";
}

SamplingParams make(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  return params;
}

SamplingParams typical(SamplingParams params, float p) {
  params.typical_p = p;
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    EachSamplerCombination, SamplerDistributionTest,
    ::testing::Values(Case{"full_t1", make(1.0f, 0, 1.0f, 0.0f), 3.0f},
                      Case{"full_t07", make(0.7f, 0, 1.0f, 0.0f), 3.0f},
                      Case{"full_t15_flat", make(1.5f, 0, 1.0f, 0.0f), 1.0f},
                      Case{"top_k40", make(1.0f, 40, 1.0f, 0.0f), 2.0f},
                      Case{"top_p09", make(1.0f, 0, 0.9f, 0.0f), 3.0f},
                      Case{"top_p095_flat", make(1.0f, 0, 0.95f, 0.0f), 1.0f},
                      Case{"min_p005", make(1.0f, 0, 1.0f, 0.05f), 3.0f},
                      Case{"top_k40_top_p05", make(1.0f, 40, 0.5f, 0.0f), 2.0f},
                      Case{"top_p08_min_p02_t12", make(1.2f, 0, 0.8f, 0.2f), 3.0f},
                      Case{"llama_server_defaults", make(0.8f, 40, 0.95f, 0.05f), 3.0f},
                      Case{"small_top_p09", make(1.0f, 0, 0.9f, 0.0f), 0.5f, 300},
                      Case{"small_min_p03", make(1.0f, 0, 1.0f, 0.3f), 0.5f, 300},
                      Case{"small_top_k40_top_p07", make(1.0f, 40, 0.7f, 0.0f), 0.3f, 300},
                      Case{"small_typical09", typical(make(1.0f, 0, 1.0f, 0.0f), 0.9f), 1.0f,
                           300},
                      Case{"small_typical05_flat", typical(make(1.0f, 0, 1.0f, 0.0f), 0.5f),
                           0.3f, 300},
                      Case{"top_k40_typical07_t08", typical(make(0.8f, 40, 1.0f, 0.0f), 0.7f),
                           2.0f},
                      Case{"small_typical08_top_p05_min_p01",
                           typical(make(1.0f, 0, 0.5f, 0.1f), 0.8f), 1.0f, 300},
                      Case{"small_typical06", typical(make(1.0f, 0, 1.0f, 0.0f), 0.6f), 0.5f,
                           300}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  std::vector<float> logits = random_logits(kVocabulary, 3.0f, 3);
  const float top = *std::max_element(logits.begin(), logits.end()) + 1.0f;
  logits[4000] = top;
  logits[4999] = top;
  logits[5006] = top;  // in the scalar tail
  Sampler sampler(make(0.0f, 0, 1.0f, 0.0f));
  EXPECT_EQ(sampler.sample(logits.data(), kVocabulary).token, 4000);
  logits[17] = top;  // in a vector lane other than the first
  EXPECT_EQ(sampler.sample(logits.data(), kVocabulary).token, 17);
}

TEST(Sampler, SameSeedSameDrawsOtherSeedOtherDraws) {
  const std::vector<float> logits = random_logits(kVocabulary, 1.0f, 5);
  auto draws = [&](uint32_t seed, SamplingParams params) {
    params.seed = seed;
    Sampler sampler(params);
    std::vector<Token> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back(sampler.sample(logits.data(), kVocabulary).token);
    return tokens;
  };
  for (const SamplingParams& params : {make(1.0f, 0, 1.0f, 0.0f), make(0.8f, 40, 0.95f, 0.05f)}) {
    EXPECT_EQ(draws(42, params), draws(42, params));
    EXPECT_NE(draws(42, params), draws(43, params));
  }
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  const std::vector<float> logits = random_logits(kVocabulary, 3.0f, 11);
  const double best = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits) sum += std::exp(double(logit) - best);
  const double log_normal = best + std::log(sum);
  std::vector<Token> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](Token a, Token b) { return logits[a] > logits[b]; });

  // Temperature and truncation change what is drawn, never the logprobs reported.
  for (const SamplingParams& params :
       {make(1.0f, 0, 1.0f, 0.0f), make(0.5f, 0, 1.0f, 0.0f), make(0.0f, 0, 1.0f, 0.0f),
        make(0.8f, 40, 0.95f, 0.05f), make(1.0f, 0, 0.9f, 0.0f)}) {
    Sampler sampler(params);
    const SampledToken sampled = sampler.sample(logits.data(), kVocabulary, 5);
    EXPECT_NEAR(sampled.logprob, logits[sampled.token] - log_normal, 1e-4);
    ASSERT_EQ(sampled.top_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(sampled.top_logprobs[i].token, order[i]);
      EXPECT_NEAR(sampled.top_logprobs[i].logprob, logits[order[i]] - log_normal, 1e-4);
    }
  }
  Sampler sampler(make(1.0f, 0, 1.0f, 0.0f));
  EXPECT_TRUE(sampler.sample(logits.data(), kVocabulary, 0).top_logprobs.empty());
}

TEST(LogitKernels, ExpMatchesTheLibraryToFloatPrecision) {
  std::vector<float> logits;
  for (float x = -90.0f; x <= 0.0f; x += 0.0137f) logits.push_back(x);
  std::vector<float> terms(logits.size());
  exp_scaled(logits.data(), static_cast<int>(logits.size()), 0.0f, 1.0f, terms.data());
  for (size_t i = 0; i < logits.size(); ++i) {
    const double exact = std::exp(double(logits[i]));
    if (logits[i] < -87.0f) {
      EXPECT_EQ(terms[i], 0.0f);
    } else {
      EXPECT_NEAR(terms[i] / exact, 1.0, 3e-7) << "at " << logits[i];
    }
  }
}

TEST(LogitKernels, BlockSumsAddUpToTheDoubleSum) {
  const std::vector<float> logits = random_logits(kVocabulary, 2.0f, 13);
  const float best = max_logit(logits.data(), kVocabulary);
  EXPECT_EQ(best, *std::max_element(logits.begin(), logits.end()));
  std::vector<double> blocks;
  const double total = sum_exp_by_block(logits.data(), kVocabulary, best, 0.5f, blocks);
  ASSERT_EQ(blocks.size(), size_t((kVocabulary + kExpBlockSize - 1) / kExpBlockSize));
  double exact = 0;
  for (float logit : logits) exact += std::exp((double(logit) - best) * 0.5);
  EXPECT_NEAR(total / exact, 1.0, 1e-6);
  EXPECT_NEAR(std::accumulate(blocks.begin(), blocks.end(), 0.0), total, 1e-9 * total);
}

TEST(LogitKernels, TopKIsTheSortedPrefixWithLowerIdsFirstOnTies) {
  std::vector<float> logits = random_logits(kVocabulary, 2.0f, 17);
  for (int i = 100; i < 5000; i += 250) logits[i] = 9.0f;  // ties at the top
  std::vector<Token> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](Token a, Token b) { return logits[a] > logits[b]; });
  for (int k : {1, 7, 16, 40, 300, kVocabulary, kVocabulary + 5}) {
    std::vector<TokenLogit> top;
    select_top_k(logits.data(), kVocabulary, k, top);
    ASSERT_EQ(top.size(), size_t(std::min(k, kVocabulary)));
    for (size_t i = 0; i < top.size(); ++i) {
      ASSERT_EQ(top[i].token, order[i]) << "k=" << k << " rank " << i;
    }
  }
}

// A constraint that allows the tokens a predicate names (a grammar's stand-in: the sampler only
// sees allows/mask/accept) and records what it was asked.
class PredicateConstraint final : public TokenConstraint {
 public:
  explicit PredicateConstraint(std::function<bool(Token)> allowed) : allowed_(std::move(allowed)) {}
  bool allows(Token token) override {
    ++checks;
    return allowed_(token);
  }
  int mask(float* logits, int vocabulary_size) override {
    ++masks;
    int allowed = 0;
    for (int token = 0; token < vocabulary_size; ++token) {
      if (allowed_(token)) {
        ++allowed;
      } else {
        logits[token] = -INFINITY;
      }
    }
    return allowed;
  }
  void accept(Token token) override { accepted.push_back(token); }

  int checks = 0;
  int masks = 0;
  std::vector<Token> accepted;

 private:
  std::function<bool(Token)> allowed_;
};

class ConstrainedSamplerTest : public ::testing::TestWithParam<Case> {};

// A refused draw is redrawn from the same distribution up to R times, then drawn from the chain
// over the masked logits. So with q the chain's distribution, Qa its mass on allowed tokens, r
// the chain's distribution over the masked logits and m = (1 - Qa)^(R+1):
//   P(t) = [t allowed] q(t) (1 - m) / Qa + m r(t).
// Without truncation q(t) / Qa = r(t), so P = r exactly: the model's distribution restricted to
// what the grammar allows, whichever path drew the token.
TEST_P(ConstrainedSamplerTest, DrawsFromTheDistributionRestrictedToTheAllowedTokens) {
  const Case& c = GetParam();
  const std::vector<float> logits = random_logits(c.vocabulary, c.spread, 7);
  auto allowed = [](Token token) { return token % 3 != 0; };
  std::vector<float> masked = logits;
  for (int token = 0; token < c.vocabulary; ++token) {
    if (!allowed(token)) masked[size_t(token)] = -INFINITY;
  }
  const std::map<Token, double> first = llama_chain_distribution(logits, c.params);
  const std::map<Token, double> redraw = llama_chain_distribution(masked, c.params);
  double allowed_mass = 0;
  for (const auto& [token, p] : first) allowed_mass += allowed(token) ? p : 0.0;
  const double all_refused = std::pow(1.0 - allowed_mass, Sampler::kConstrainedRedraws + 1);
  std::map<Token, double> expected;
  for (const auto& [token, p] : first) {
    if (allowed(token)) expected[token] += p * (1.0 - all_refused) / allowed_mass;
  }
  for (const auto& [token, p] : redraw) {
    if (p > 0) expected[token] += all_refused * p;
  }
  if (c.params.top_k == 0 && c.params.top_p >= 1.0f && c.params.min_p <= 0.0f) {
    for (const auto& [token, p] : expected) EXPECT_NEAR(p, redraw.at(token), 1e-9);
  }

  SamplingParams params = c.params;
  params.seed = 99;
  auto constraint = std::make_shared<PredicateConstraint>(allowed);
  Sampler sampler(params, constraint);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kDraws = 10000;
#else
  constexpr int kDraws = 100000;
#endif
  std::vector<int> observed(size_t(c.vocabulary), 0);
  for (int i = 0; i < kDraws; ++i) {
    const SampledToken sampled = sampler.sample(logits.data(), c.vocabulary);
    ASSERT_FALSE(sampled.constraint_dead_end);
    ++observed[size_t(sampled.token)];
  }
  const ChiSquare test = chi_square(expected, observed, kDraws);
  EXPECT_EQ(test.draws_outside_support, 0) << "drew a token the constraint refused";
  EXPECT_LT(test.statistic, chi_square_critical(test.degrees_of_freedom))
      << "chi-square " << test.statistic << " with " << test.degrees_of_freedom
      << " degrees of freedom over " << expected.size() << " tokens";
  EXPECT_EQ(constraint->accepted.size(), size_t(kDraws));
  // About a third of the mass is refused: redraws almost always find an allowed token.
  EXPECT_LT(constraint->masks, kDraws / 100);
}

INSTANTIATE_TEST_SUITE_P(
    SomeSamplerCombinations, ConstrainedSamplerTest,
    ::testing::Values(Case{"full_t1", make(1.0f, 0, 1.0f, 0.0f), 1.0f},
                      Case{"full_t07", make(0.7f, 0, 1.0f, 0.0f), 2.0f},
                      Case{"top_k40", make(1.0f, 40, 1.0f, 0.0f), 2.0f},
                      Case{"top_p09", make(1.0f, 0, 0.9f, 0.0f), 1.0f, 300},
                      Case{"llama_server_defaults", make(0.8f, 40, 0.95f, 0.05f), 1.0f, 300}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ConstrainedSampler, GreedyTakesTheBestAllowedAndLogprobsStayTheModels) {
  std::vector<float> logits = random_logits(kVocabulary, 3.0f, 21);
  logits[10] = 100.0f;  // the model's choice, refused
  logits[11] = 90.0f;   // the best allowed
  auto constraint = std::make_shared<PredicateConstraint>([](Token t) { return t != 10; });
  Sampler sampler(make(0.0f, 0, 1.0f, 0.0f), constraint);
  const SampledToken sampled = sampler.sample(logits.data(), kVocabulary, 0);
  EXPECT_EQ(sampled.token, 11);
  // log-softmax of the raw logits: token 10 holds almost all of the mass.
  EXPECT_NEAR(sampled.logprob, -10.0f, 1e-3f);
  EXPECT_EQ(constraint->accepted, std::vector<Token>{11});
  EXPECT_EQ(constraint->masks, 0);  // found among the most likely tokens
}

TEST(ConstrainedSampler, GreedyMasksWhenNoLikelyTokenIsAllowed) {
  std::vector<float> logits = random_logits(kVocabulary, 3.0f, 22);
  for (int t = 0; t < 100; ++t) logits[size_t(t)] = 50.0f + float(t);  // all refused
  const auto best_allowed = std::max_element(logits.begin() + 100, logits.end()) - logits.begin();
  auto constraint = std::make_shared<PredicateConstraint>([](Token t) { return t >= 100; });
  Sampler sampler(make(0.0f, 0, 1.0f, 0.0f), constraint);
  EXPECT_EQ(sampler.sample(logits.data(), kVocabulary).token, best_allowed);
  EXPECT_EQ(constraint->masks, 1);
}

TEST(ConstrainedSampler, ARareAllowedTokenIsFoundByTheMask) {
  std::vector<float> logits(size_t(kVocabulary), 0.0f);
  logits[7] = 40.0f;  // nearly all the mass, refused; redraws keep drawing it
  auto constraint = std::make_shared<PredicateConstraint>([](Token t) { return t == 4321; });
  Sampler sampler(make(1.0f, 0, 1.0f, 0.0f), constraint);
  EXPECT_EQ(sampler.sample(logits.data(), kVocabulary).token, 4321);
  EXPECT_EQ(constraint->masks, 1);
  EXPECT_EQ(constraint->checks, 1 + Sampler::kConstrainedRedraws + 1);
}

TEST(ConstrainedSampler, AnAllowedDrawIsCheckedOnceAndNeverMasked) {
  const std::vector<float> logits = random_logits(kVocabulary, 3.0f, 5);
  auto constraint = std::make_shared<PredicateConstraint>([](Token) { return true; });
  Sampler sampler(make(1.0f, 0, 1.0f, 0.0f), constraint);
  for (int i = 0; i < 100; ++i) sampler.sample(logits.data(), kVocabulary);
  EXPECT_EQ(constraint->checks, 100);
  EXPECT_EQ(constraint->masks, 0);
}

TEST(Sampler, LogitBiasBansAndForcesButLogprobsStayTheModels) {
  std::vector<float> logits = random_logits(kVocabulary, 3.0f, 31);
  logits[42] = 100.0f;
  SamplingParams params = make(0.0f, 0, 1.0f, 0.0f);
  params.logit_bias = {{42, -100.0f}};
  Sampler banned(params);
  const SampledToken sampled = banned.sample(logits.data(), kVocabulary, 1);
  EXPECT_NE(sampled.token, 42);
  ASSERT_EQ(sampled.top_logprobs.size(), 1u);
  EXPECT_EQ(sampled.top_logprobs[0].token, 42);  // the model's own most likely token
  logits[7] = 5.0f;
  params.logit_bias = {{7, 100.0f}, {kVocabulary + 5, 3.0f}};  // an id past the end is skipped
  Sampler forced(params);
  EXPECT_EQ(forced.sample(logits.data(), kVocabulary).token, 7);  // 5 + 100 > 100
}

// llama.cpp's penalties sampler applied to `logits` after it has seen `history` (its window
// holding the last `last_n`).
std::vector<float> llama_penalized(const std::vector<float>& logits,
                                   const std::vector<Token>& history, int last_n,
                                   const PenaltyParams& params) {
  llama_sampler* penalties =
      llama_sampler_init_penalties(static_cast<int32_t>(logits.size()), last_n, params.repetition,
                                   params.frequency, params.presence);
  for (const Token token : history) llama_sampler_accept(penalties, token);
  std::vector<float> penalized(logits.size());
  for (const llama_token_data& entry : apply_and_free(penalties, logits)) {
    penalized[size_t(entry.id)] = entry.logit;
  }
  return penalized;
}

std::vector<Token> repetitive_tokens(int count, int distinct, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> pick(0, distinct - 1);
  std::vector<Token> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(pick(rng) * 37);  // spread over the vocabulary
  return tokens;
}

// Over an answer alone (what presence and frequency count) every penalty equals llama.cpp's,
// to the bit: repetition first, then frequency per occurrence and presence once.
TEST(TokenPenalties, EqualLlamaCppsOverTheAnswersTokens) {
  const std::vector<float> logits = random_logits(kVocabulary, 3.0f, 41);
  const std::vector<Token> answer = repetitive_tokens(300, 40, 7);
  PenaltyParams params;
  params.presence = 0.6f;
  params.frequency = 0.25f;
  params.repetition = 1.3f;
  TokenPenalties penalties(params);
  for (const Token token : answer) penalties.add_generated(token);
  std::vector<float> ours = logits;
  penalties.apply(ours.data(), kVocabulary);
  const std::vector<float> reference =
      llama_penalized(logits, answer, static_cast<int>(answer.size()), params);
  int changed = 0;
  for (int i = 0; i < kVocabulary; ++i) {
    ASSERT_EQ(ours[size_t(i)], reference[size_t(i)]) << "token " << i;
    changed += ours[size_t(i)] != logits[size_t(i)];
  }
  EXPECT_EQ(changed, 40);
}

// The repetition penalty counts the prompt too, over a window of the last N tokens (llama-server
// counts prompt and answer alike, and its repeat_last_n is that window).
TEST(TokenPenalties, TheRepetitionWindowSlidesOverThePromptAndTheAnswer) {
  const std::vector<float> logits = random_logits(kVocabulary, 3.0f, 43);
  const std::vector<Token> prompt = repetitive_tokens(100, 60, 9);
  const std::vector<Token> answer = repetitive_tokens(50, 60, 10);
  for (const int last_n : {-1, 64, 120, 1}) {
    PenaltyParams params;
    params.repetition = 1.5f;
    params.repetition_last_n = last_n;
    TokenPenalties penalties(params);
    penalties.add_prompt(prompt);
    for (const Token token : answer) penalties.add_generated(token);
    std::vector<float> ours = logits;
    penalties.apply(ours.data(), kVocabulary);
    std::vector<Token> history = prompt;
    history.insert(history.end(), answer.begin(), answer.end());
    const std::vector<float> reference = llama_penalized(
        logits, history, last_n < 0 ? static_cast<int>(history.size()) : last_n, params);
    for (int i = 0; i < kVocabulary; ++i) {
      ASSERT_EQ(ours[size_t(i)], reference[size_t(i)]) << "token " << i << ", last_n " << last_n;
    }
  }
}

// Greedy draws from the penalized logits, and logprobs stay the model's own.
TEST(Sampler, PenaltiesSteerTheDrawButLogprobsStayTheModels) {
  std::vector<float> logits(kVocabulary, 0.0f);
  logits[5] = 3.0f;
  logits[9] = 2.5f;
  SamplingParams params = make(0.0f, 0, 1.0f, 0.0f);
  params.penalties.frequency = 0.3f;
  Sampler sampler(params);
  std::vector<Token> drawn;
  for (int i = 0; i < 4; ++i) drawn.push_back(sampler.sample(logits.data(), kVocabulary, 0).token);
  // 5 until twice drawn (3.0 - 0.6 = 2.4 < 2.5), then 9, then 5 again (2.4 > 2.5 - 0.3).
  EXPECT_EQ(drawn, (std::vector<Token>{5, 5, 9, 5}));
  const SampledToken last = sampler.sample(logits.data(), kVocabulary, 0);
  EXPECT_NEAR(last.logprob, logits[size_t(last.token)] -
                                std::log(std::exp(3.0) + std::exp(2.5) + (kVocabulary - 2)),
              1e-4);
  // Presence once per token: -0.5 takes 5 below 9 after one draw and keeps it there.
  params.penalties = {};
  params.penalties.presence = 0.6f;
  Sampler present(params);
  drawn.clear();
  for (int i = 0; i < 3; ++i) drawn.push_back(present.sample(logits.data(), kVocabulary).token);
  EXPECT_EQ(drawn, (std::vector<Token>{5, 9, 5}));
}

TEST(ConstrainedSampler, NothingAllowedIsADeadEndNotAToken) {
  const std::vector<float> logits = random_logits(kVocabulary, 3.0f, 5);
  auto constraint = std::make_shared<PredicateConstraint>([](Token) { return false; });
  Sampler sampler(make(1.0f, 0, 1.0f, 0.0f), constraint);
  EXPECT_TRUE(sampler.sample(logits.data(), kVocabulary).constraint_dead_end);
  EXPECT_TRUE(constraint->accepted.empty());
}

}  // namespace
}  // namespace brisk
