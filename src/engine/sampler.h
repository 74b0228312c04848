#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/logit_kernels.h"
#include "engine/token.h"
#include "engine/token_penalties.h"
#include "engine/token_constraint.h"

namespace brisk {

// What a request may ask for; the server fills what it leaves out from its defaults
// (docs/cli.md, --generation-config). The values here are OpenAI's: the full distribution.
struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 = off
  float min_p = 0.0f;
  float typical_p = 1.0f;  // locally typical sampling (llama.cpp's typ_p): 1 = off
  std::optional<uint32_t> seed;
  // Added to a token's logit before the draw (OpenAI's logit_bias); -100 or less bans the token.
  std::vector<std::pair<Token, float>> logit_bias;
  // Against the tokens the sequence has seen, after logit_bias and before everything else.
  PenaltyParams penalties;
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
  // The request's constraint allows no token at all (or failed): the sequence cannot go on.
  bool constraint_dead_end = false;
};

// Draws from the distribution llama.cpp's sampler chain top-k -> typical -> top-p -> min-p ->
// temperature -> dist defines (llama-server's order), in a few vectorized passes over the logits
// and without copying the vocabulary. One per sequence: it holds the sequence's random state, so a
// given seed reproduces its draws. Independent samplers may run on different threads.
class Sampler {
 public:
  // `constraint` (may be null): only tokens it allows are drawn; each drawn token is accepted
  // into it. A refused draw is redrawn from the same distribution up to kConstrainedRedraws
  // times (greedy: the best of the kGreedyCandidates most likely tokens that is allowed), and
  // only then is the whole vocabulary masked: a grammar check costs microseconds, a mask of a
  // 262,144-token vocabulary milliseconds. Without truncation every path draws from the model's
  // distribution restricted to the allowed tokens, exactly.
  explicit Sampler(const SamplingParams& params,
                   std::shared_ptr<TokenConstraint> constraint = nullptr);

  // `logits` holds one entry per vocabulary token. top_logprobs < 0 computes no logprobs, 0 the
  // chosen token's, N also the N most likely tokens' (always the model's own distribution,
  // before any constraint).
  SampledToken sample(const float* logits, int vocabulary_size, int top_logprobs = -1);

  const SamplingParams& params() const { return params_; }
  // The prompt, for a repetition penalty (which counts its tokens); nothing without one.
  void add_prompt(std::span<const Token> prompt) { penalties_.add_prompt(prompt); }

  static constexpr int kConstrainedRedraws = 64;
  static constexpr int kGreedyCandidates = 64;

 private:
  bool truncates() const;
  // The logits the draw sees: the model's, or a copy with the request's logit_bias and
  // penalties applied.
  const float* adjusted(const float* logits, int count);
  Token draw(const float* logits, int count);
  // Replaces a draw the constraint refused; false when it allows no token.
  bool redraw_allowed(const float* logits, int count, Token* token);
  // Draws among the tokens the constraint allows, on a masked copy of the logits.
  bool draw_masked(const float* logits, int count, Token* token);
  // Draws among the tokens whose logit is at least `floor` (-infinity: all of them).
  Token draw_from_full_distribution(const float* logits, int count, float max, float floor);
  Token draw_from_truncated(const float* logits, int count, float max);
  // Locally typical sampling: the candidates (top-k's, else the vocabulary) whose surprise is
  // nearest the distribution's entropy, until they hold more than typical_p of its mass; left
  // in candidates_, best first.
  void keep_typical(const float* logits, int count);
  float top_p_logit_cut(const float* logits, int count, float max);
  size_t top_p_cut(double mass) const;
  size_t min_p_cut(size_t size) const;
  Token draw_from_candidates(size_t size);
  // The logits of the first `size` candidates, contiguous (in candidate_logits_).
  const float* gather_candidate_logits(size_t size);
  Token pick_from_blocks(const float* logits, int count);
  Token pick_from_candidates(size_t size);
  // Another draw from the distribution of the last draw(), reusing its sums.
  Token redraw(const float* logits, int count);
  double log_normalizer(const float* logits, int count, float max);

  SamplingParams params_;
  std::shared_ptr<TokenConstraint> constraint_;
  // What the last draw computed, for redraws: block sums (in block_sums_) with their total, or
  // the first `candidates` entries of candidates_. none: greedy.
  struct LastDraw {
    enum class Kind { none, blocks, candidates };
    Kind kind = Kind::none;
    float max = 0;
    float floor = 0;
    double total = 0;
    size_t candidates = 0;
  };
  LastDraw last_draw_;
  std::vector<float> masked_logits_;
  std::vector<float> adjusted_logits_;
  TokenPenalties penalties_;
  std::mt19937 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  // Scratch reused between draws (no allocation per token once warm).
  std::vector<double> block_sums_;
  std::vector<float> block_terms_;
  std::vector<double> mass_buckets_;
  std::vector<TokenLogit> candidates_;
  // keep_typical()'s scratch: each candidate with its distance from the entropy and its mass.
  struct TypicalCandidate {
    TokenLogit candidate;
    double distance;
    double mass;
  };
  std::vector<TypicalCandidate> typical_;
  // The first candidates' logits, contiguous, and their exp terms (keep_typical,
  // pick_from_candidates), so that one vectorized pass computes the terms.
  std::vector<float> candidate_logits_;
  std::vector<float> candidate_weights_;
  std::vector<TokenLogit> top_logprob_candidates_;
  // log(sum(exp(logit - max))) at temperature 1, when this draw already computed it.
  std::optional<double> log_sum_at_unit_temperature_;
};

}  // namespace brisk
