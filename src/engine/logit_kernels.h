#pragma once

#include <limits>
#include <vector>

#include "engine/token.h"

namespace brisk {

// One-pass, vectorized scans over a row of logits (one entry per vocabulary token). They read
// the row where llama.cpp left it: nothing copies the vocabulary into a candidate array, which
// for Gemma's 262,144 tokens costs more than the scans themselves. Each function is compiled for
// AVX-512, AVX2 and baseline x86-64 and the best is picked at load time.

struct TokenLogit {
  Token token;
  float logit;
};

// Entries summed per block by sum_exp_by_block: small enough that re-reading one block to find
// a drawn token is cheap, large enough that the block sums stay few.
inline constexpr int kExpBlockSize = 1024;

float max_logit(const float* logits, int count);

// The first index holding the largest logit (what llama.cpp's greedy sampler picks).
Token first_argmax(const float* logits, int count);

// exp((logit - shift) * scale) for logits <= shift (scale > 0), to float precision; a term below
// 1e-37 counts as 0 (next to the largest term, which is 1, it cannot change a draw), and so does
// every logit below `floor` (a truncation's cut).
void exp_scaled(const float* logits, int count, float shift, float scale, float* out,
                float floor = -std::numeric_limits<float>::infinity());

// The same terms summed, per block of kExpBlockSize entries into `block_sums` (resized), and in
// total (the return value).
double sum_exp_by_block(const float* logits, int count, float shift, float scale,
                        std::vector<double>& block_sums,
                        float floor = -std::numeric_limits<float>::infinity());

// Probability mass by how far a logit lies below `max`: bucket b holds exp(logit - max) summed
// over logits with b <= (max - logit) * kMassBucketsPerLogit < b + 1; the last bucket also holds
// everything further down. Finds a top-p cut without sorting the vocabulary.
inline constexpr int kMassBucketsPerLogit = 64;
inline constexpr int kMassBuckets = 32 * kMassBucketsPerLogit;
void mass_histogram(const float* logits, int count, float max, std::vector<double>& buckets);

// The entries of one mass_histogram bucket, largest first (equal logits: lower id first).
void collect_mass_bucket(const float* logits, int count, float max, int bucket,
                         std::vector<TokenLogit>& out);

// The k largest logits, largest first; equal logits keep the lower token id first.
void select_top_k(const float* logits, int count, int k, std::vector<TokenLogit>& out);

}  // namespace brisk
