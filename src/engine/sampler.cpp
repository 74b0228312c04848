#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <utility>

namespace brisk {

Sampler::Sampler(const SamplingParams& params, std::shared_ptr<TokenConstraint> constraint)
    : params_(params),
      constraint_(std::move(constraint)),
      penalties_(params.penalties),
      rng_(params.seed.value_or(std::random_device{}())) {}

bool Sampler::truncates() const {
  return params_.top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f ||
         params_.typical_p < 1.0f;
}

SampledToken Sampler::sample(const float* model_logits, int vocabulary_size, int top_logprobs) {
  const float* logits = adjusted(model_logits, vocabulary_size);
  SampledToken sampled;
  sampled.token = draw(logits, vocabulary_size);
  if (constraint_) {
    try {
      if (!constraint_->allows(sampled.token) &&
          !redraw_allowed(logits, vocabulary_size, &sampled.token)) {
        sampled.constraint_dead_end = true;
        return sampled;
      }
      constraint_->accept(sampled.token);
    } catch (const std::exception&) {
      sampled.constraint_dead_end = true;
      return sampled;
    }
  }
  if (params_.penalties.any()) penalties_.add_generated(sampled.token);
  if (top_logprobs < 0) return sampled;

  // logprobs are the model's: from its own logits, whatever the bias and the constraint did.
  if (logits != model_logits) log_sum_at_unit_temperature_.reset();
  logits = model_logits;
  const float max = max_logit(logits, vocabulary_size);
  const double log_normal = log_normalizer(logits, vocabulary_size, max);
  sampled.logprob = static_cast<float>(logits[sampled.token] - log_normal);
  if (top_logprobs > 0) {
    select_top_k(logits, vocabulary_size, top_logprobs, top_logprob_candidates_);
    for (const TokenLogit& candidate : top_logprob_candidates_) {
      sampled.top_logprobs.push_back(
          {candidate.token, static_cast<float>(candidate.logit - log_normal)});
    }
  }
  return sampled;
}

const float* Sampler::adjusted(const float* logits, int count) {
  if (params_.logit_bias.empty() && !params_.penalties.any()) return logits;
  adjusted_logits_.assign(logits, logits + count);
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token < 0 || token >= count) continue;
    float& logit = adjusted_logits_[size_t(token)];
    logit = bias <= -100.0f ? -std::numeric_limits<float>::infinity() : logit + bias;
  }
  penalties_.apply(adjusted_logits_.data(), count);
  return adjusted_logits_.data();
}

Token Sampler::draw(const float* logits, int count) {
  log_sum_at_unit_temperature_.reset();
  last_draw_ = LastDraw{};
  if (params_.temperature <= 0.0f) return first_argmax(logits, count);
  const float max = max_logit(logits, count);
  if (!truncates()) {
    return draw_from_full_distribution(logits, count, max,
                                       -std::numeric_limits<float>::infinity());
  }
  return draw_from_truncated(logits, count, max);
}

// Redrawing from the same distribution until a draw is allowed is rejection sampling: it draws
// from the distribution restricted to the allowed tokens. When the allowed tokens hold little of
// the mass, the mask (whose cost does not depend on that mass) takes over.
bool Sampler::redraw_allowed(const float* logits, int count, Token* token) {
  if (params_.temperature <= 0.0f) {
    select_top_k(logits, count, kGreedyCandidates, candidates_);
    for (const TokenLogit& candidate : candidates_) {
      if (constraint_->allows(candidate.token)) {
        *token = candidate.token;
        return true;
      }
    }
    return draw_masked(logits, count, token);
  }
  for (int i = 0; i < kConstrainedRedraws; ++i) {
    *token = redraw(logits, count);
    if (constraint_->allows(*token)) return true;
  }
  return draw_masked(logits, count, token);
}

// The same draw (truncation, temperature) over the allowed tokens only, on a copy of the logits
// (the model's own stay for logprobs).
bool Sampler::draw_masked(const float* logits, int count, Token* token) {
  masked_logits_.assign(logits, logits + count);
  if (constraint_->mask(masked_logits_.data(), count) <= 0) return false;
  *token = draw(masked_logits_.data(), count);
  // The normalizer cached by that draw belongs to the masked logits, not the model's.
  log_sum_at_unit_temperature_.reset();
  return constraint_->allows(*token);
}

// Inverse-CDF draw without sorting: one pass sums exp((logit - max) / T) per block, a uniform
// draw picks the block by the block sums, and only that block's terms are recomputed to pick
// the token. Order does not matter for a draw from the whole distribution.
Token Sampler::draw_from_full_distribution(const float* logits, int count, float max, float floor) {
  const float scale = 1.0f / params_.temperature;
  const bool whole = floor == -std::numeric_limits<float>::infinity();
  const double total = sum_exp_by_block(logits, count, max, scale, block_sums_, floor);
  if (whole && params_.temperature == 1.0f) log_sum_at_unit_temperature_ = std::log(total);
  last_draw_ = LastDraw{LastDraw::Kind::blocks, max, floor, total, 0};
  return pick_from_blocks(logits, count);
}

// The second half of a full-distribution draw: the block sums of the last one are reused, so a
// redraw costs one block's terms, not a pass over the vocabulary.
Token Sampler::pick_from_blocks(const float* logits, int count) {
  const float scale = 1.0f / params_.temperature;
  const float max = last_draw_.max;
  const float floor = last_draw_.floor;
  const double target = uniform_(rng_) * last_draw_.total;

  double before = 0;
  size_t block = 0;
  while (block + 1 < block_sums_.size() && before + block_sums_[block] < target) {
    before += block_sums_[block++];
  }
  // Rounding can carry the walk past the last block that holds any mass (a cut may empty the
  // blocks after it); step back to it.
  while (block > 0 && block_sums_[block] <= 0.0) before -= block_sums_[--block];
  const int start = static_cast<int>(block) * kExpBlockSize;
  const int size = std::min(kExpBlockSize, count - start);
  block_terms_.resize(static_cast<size_t>(kExpBlockSize));
  exp_scaled(logits + start, size, max, scale, block_terms_.data(), floor);
  double cumulative = before;
  int last_possible = start;
  for (int i = 0; i < size; ++i) {
    if (block_terms_[static_cast<size_t>(i)] <= 0.0f) continue;
    last_possible = start + i;
    cumulative += block_terms_[static_cast<size_t>(i)];
    if (cumulative >= target) return start + i;
  }
  // Rounding left the target a hair above this block's recomputed sum.
  return last_possible;
}

Token Sampler::redraw(const float* logits, int count) {
  if (last_draw_.kind == LastDraw::Kind::blocks) return pick_from_blocks(logits, count);
  if (last_draw_.kind == LastDraw::Kind::candidates) {
    return pick_from_candidates(last_draw_.candidates);
  }
  return draw(logits, count);
}

// The truncations run as llama.cpp's chain applies them: top-k, then typical, then top-p over
// what is left (renormalized), then min-p relative to the best, then temperature; the draw is
// over the survivors. With top-k or typical the survivors are a list, the best first. Without
// them top-p and min-p each keep every token at or above a logit cut, so the draw is a
// full-distribution draw above the higher cut, and nothing is sorted but the one histogram
// bucket where the top-p cut falls.
Token Sampler::draw_from_truncated(const float* logits, int count, float max) {
  if (params_.top_k > 0 || params_.typical_p < 1.0f) {
    if (params_.top_k > 0) select_top_k(logits, count, params_.top_k, candidates_);
    if (params_.typical_p < 1.0f) keep_typical(logits, count);
    size_t size = candidates_.size();
    if (params_.top_p < 1.0f && size > 0) {
      // Against the best candidate: typical sampling may have dropped the most likely token.
      const double front = candidates_.front().logit;
      double mass = 0;
      for (const TokenLogit& c : candidates_) mass += std::exp(double(c.logit) - front);
      size = std::min(size, top_p_cut(mass));
    }
    return draw_from_candidates(min_p_cut(size));
  }
  float cut = -std::numeric_limits<float>::infinity();
  if (params_.top_p < 1.0f) cut = top_p_logit_cut(logits, count, max);
  if (params_.min_p > 0.0f) cut = std::max(cut, max + std::log(params_.min_p));
  return draw_from_full_distribution(logits, count, max, cut);
}

// As llama.cpp's typical sampler: with p the candidates' softmax and H its entropy, the
// candidates are taken in order of |-log p - H| until their mass exceeds typical_p. That order
// is by distance from one logit, best + log(sum) - H, so the kept set is found by a selection
// weighted by mass (a quickselect that keeps the side the cut falls in), with nothing sorted:
// linear in the candidates, as top-p's cut is.
void Sampler::keep_typical(const float* logits, int count) {
  // The candidates: top-k's, else the whole vocabulary as it lies.
  const bool after_top_k = params_.top_k > 0;
  const size_t size = after_top_k ? candidates_.size() : size_t(count);
  if (size == 0) return;
  const float* candidate_logits = after_top_k ? gather_candidate_logits(size) : logits;
  const float best = max_logit(candidate_logits, int(size));
  candidate_weights_.resize(size);
  exp_scaled(candidate_logits, int(size), best, 1.0f, candidate_weights_.data());
  double total = 0;
  double weighted = 0;  // sum of w (logit - best)
  for (size_t i = 0; i < size; ++i) {
    const double w = candidate_weights_[i];
    if (w <= 0) continue;  // a banned token (-inf) has no mass and no surprise to weigh
    total += w;
    weighted += w * (double(candidate_logits[i]) - best);
  }
  const double entropy = std::log(total) - weighted / total;
  const double center = best + std::log(total) - entropy;
  typical_.resize(size);
  for (size_t i = 0; i < size; ++i) {
    const Token token = after_top_k ? candidates_[i].token : Token(i);
    typical_[i] = {{token, candidate_logits[i]}, std::fabs(center - candidate_logits[i]),
                   candidate_weights_[i] / total};
  }
  // Invariant: [0, lo) are nearer than the rest and hold `before` of the mass, not more than
  // typical_p; the cut falls in [lo, hi).
  size_t lo = 0;
  size_t hi = typical_.size();
  double before = 0;
  std::optional<size_t> kept;
  while (lo < hi && !kept) {
    const double pivot = typical_[lo + (hi - lo) / 2].distance;
    const auto first = typical_.begin() + long(lo);
    const auto last = typical_.begin() + long(hi);
    const auto nearer = std::partition(first, last, [&](const TypicalCandidate& c) {
      return c.distance < pivot;
    });
    const auto tied = std::partition(nearer, last, [&](const TypicalCandidate& c) {
      return c.distance == pivot;
    });
    double near_mass = 0;
    for (auto it = first; it != nearer; ++it) near_mass += it->mass;
    if (before + near_mass > params_.typical_p && nearer != first) {
      hi = size_t(nearer - typical_.begin());  // the cut is among the nearer ones
      continue;
    }
    before += near_mass;
    // The tied ones (the pivot's distance), in turn.
    for (auto it = nearer; it != tied && !kept; ++it) {
      before += it->mass;
      if (before > params_.typical_p) kept = size_t(it - typical_.begin()) + 1;
    }
    lo = size_t(tied - typical_.begin());
  }
  // Never crossing (typical_p near 1, or rounding): everything up to where the walk ended.
  const size_t kept_size = std::max<size_t>(1, kept.value_or(lo));
  candidates_.resize(kept_size);
  for (size_t i = 0; i < kept_size; ++i) candidates_[i] = typical_[i].candidate;
  if (params_.top_p < 1.0f || params_.min_p > 0.0f) {
    // top-p and min-p walk the survivors best first.
    std::sort(candidates_.begin(), candidates_.end(), [](const TokenLogit& a, const TokenLogit& b) {
      return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
    });
  } else {  // the draw needs only the best first
    std::iter_swap(candidates_.begin(),
                   std::max_element(candidates_.begin(), candidates_.end(),
                                    [](const TokenLogit& a, const TokenLogit& b) {
                                      return a.logit < b.logit;
                                    }));
  }
}

// The logit of the last token top-p keeps, the tokens sorted best first: the cumulative mass
// crosses top_p inside one bucket of a mass histogram, and only that bucket is sorted. (Tokens
// tied with the last one kept are kept too; llama.cpp keeps an arbitrary subset of such ties.)
float Sampler::top_p_logit_cut(const float* logits, int count, float max) {
  const double total = sum_exp_by_block(logits, count, max, 1.0f, block_sums_);
  log_sum_at_unit_temperature_ = std::log(total);
  const double wanted = double(params_.top_p) * total;
  mass_histogram(logits, count, max, mass_buckets_);
  double above = 0;
  int bucket = 0;
  while (bucket + 1 < kMassBuckets && above + mass_buckets_[size_t(bucket)] < wanted) {
    above += mass_buckets_[size_t(bucket++)];
  }
  collect_mass_bucket(logits, count, max, bucket, candidates_);
  if (candidates_.empty()) return max;  // only rounding can leave the bucket empty
  for (const TokenLogit& candidate : candidates_) {
    above += std::exp(double(candidate.logit) - max);
    if (above >= wanted) return candidate.logit;
  }
  return candidates_.back().logit;
}

// How many of the best-first candidates top-p keeps: the shortest prefix whose probability
// (against `mass`, the normalizer of the set top-p sees) reaches top_p; at least one.
size_t Sampler::top_p_cut(double mass) const {
  if (params_.top_p >= 1.0f) return candidates_.size();
  const float max = candidates_.front().logit;
  double cumulative = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += std::exp(double(candidates_[i].logit) - max) / mass;
    if (cumulative >= params_.top_p) return i + 1;
  }
  return candidates_.size();
}

size_t Sampler::min_p_cut(size_t size) const {
  if (params_.min_p <= 0.0f || size == 0) return size;
  const float threshold = candidates_.front().logit + std::log(params_.min_p);
  size_t kept = 1;
  while (kept < size && candidates_[kept].logit >= threshold) ++kept;
  return kept;
}

Token Sampler::draw_from_candidates(size_t size) {
  last_draw_ = LastDraw{LastDraw::Kind::candidates, 0, 0, 0, size};
  return pick_from_candidates(size);
}

const float* Sampler::gather_candidate_logits(size_t size) {
  candidate_logits_.resize(size);
  for (size_t i = 0; i < size; ++i) candidate_logits_[i] = candidates_[i].logit;
  return candidate_logits_.data();
}

// The candidates' terms in one vectorized pass (typical sampling may keep thousands), then the
// inverse-CDF walk.
Token Sampler::pick_from_candidates(size_t size) {
  if (size <= 1) return candidates_.front().token;
  candidate_weights_.resize(size);
  exp_scaled(gather_candidate_logits(size), int(size), candidates_.front().logit,
             1.0f / params_.temperature, candidate_weights_.data());
  double total = 0;
  for (size_t i = 0; i < size; ++i) total += candidate_weights_[i];
  const double target = uniform_(rng_) * total;
  double cumulative = 0;
  for (size_t i = 0; i < size; ++i) {
    cumulative += candidate_weights_[i];
    if (cumulative >= target) return candidates_[i].token;
  }
  return candidates_[size - 1].token;
}

// log(sum(exp(logit))) over the vocabulary: the normalizer of the model's own distribution.
double Sampler::log_normalizer(const float* logits, int count, float max) {
  if (!log_sum_at_unit_temperature_) {
    log_sum_at_unit_temperature_ =
        std::log(sum_exp_by_block(logits, count, max, 1.0f, block_sums_));
  }
  return max + *log_sum_at_unit_temperature_;
}

}  // namespace brisk
