#include "engine/logit_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace brisk {
namespace {

#pragma GCC diagnostic ignored "-Wpsabi"  // Lanes never cross a call boundary (all inlined)

// Eight floats: one AVX register (two SSE registers in the baseline clone). Wider vectors get
// their selects split into scalar code by GCC 12 on AVX2.
using Lanes = float __attribute__((vector_size(32)));
using IntLanes = int32_t __attribute__((vector_size(32)));
constexpr int kLanes = 8;

// No clones under a sanitizer: their ifunc resolvers run while the dynamic loader relocates the
// binary, before the sanitizer's runtime is up, and an instrumented resolver crashes there
// (ThreadSanitizer: SIGSEGV before main). The baseline code is checked instead.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define BRISK_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BRISK_VECTOR_CLONES
#endif
// Helpers take on the instruction set of the clone they are inlined into.
#define ALWAYS_INLINE inline __attribute__((always_inline))

ALWAYS_INLINE Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

ALWAYS_INLINE Lanes splat(float value) { return Lanes{} + value; }

template <typename To, typename From>
ALWAYS_INLINE To bits_as(From value) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &value, sizeof out);
  return out;
}

// exp(x) for x <= 0 by Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf
// coefficients, relative error ~1e-7). Written once for a float and for Lanes so the scalar
// tail computes exactly the terms the vector body does.
template <typename Float, typename Int>
ALWAYS_INLINE Float exp_nonpositive(Float x) {
  constexpr float kLowest = -87.0f;           // 2^-125.5: the last exponent a float still holds
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const Float clamped = x < kLowest ? Float{} + kLowest : x;
  const Float shifted = clamped * 1.44269504088896341f + kRoundMagic;
  const Float n = shifted - kRoundMagic;
  Float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Float p = Float{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Float poly = p * r * r + r + 1.0f;
  const Int exponent = bits_as<Int>(shifted) - bits_as<int32_t>(kRoundMagic);
  const Float scale = bits_as<Float>((exponent + 127) << 23);
  return x < kLowest ? Float{} : poly * scale;
}

ALWAYS_INLINE float exp_one(float x) { return exp_nonpositive<float, int32_t>(x); }
ALWAYS_INLINE Lanes exp_lanes(Lanes x) { return exp_nonpositive<Lanes, IntLanes>(x); }

ALWAYS_INLINE float horizontal_max(Lanes v) {
  float best = v[0];
  for (int lane = 1; lane < kLanes; ++lane) best = std::max(best, v[lane]);
  return best;
}

ALWAYS_INLINE double horizontal_sum(Lanes v) {
  double sum = 0;
  for (int lane = 0; lane < kLanes; ++lane) sum += v[lane];
  return sum;
}

ALWAYS_INLINE Lanes term_lanes(const float* p, float shift, float scale, float floor) {
  const Lanes logit = load(p);
  const Lanes term = exp_lanes((logit - shift) * scale);
  return logit >= floor ? term : Lanes{};
}

ALWAYS_INLINE float term_one(float logit, float shift, float scale, float floor) {
  return logit >= floor ? exp_one((logit - shift) * scale) : 0.0f;
}

ALWAYS_INLINE int mass_bucket_of(float logit, float max) {
  const float distance = (max - logit) * static_cast<float>(kMassBucketsPerLogit);
  return distance < static_cast<float>(kMassBuckets - 1) ? static_cast<int>(distance)
                                                         : kMassBuckets - 1;
}

// The largest of count logits, vectorized; -infinity for none.
BRISK_VECTOR_CLONES float block_max(const float* logits, int count) {
  Lanes best_a = splat(-std::numeric_limits<float>::infinity());
  Lanes best_b = best_a;
  int i = 0;
  for (; i + 2 * kLanes <= count; i += 2 * kLanes) {
    const Lanes a = load(logits + i);
    const Lanes b = load(logits + i + kLanes);
    best_a = a > best_a ? a : best_a;
    best_b = b > best_b ? b : best_b;
  }
  best_a = best_b > best_a ? best_b : best_a;
  float best = horizontal_max(best_a);
  for (; i < count; ++i) best = std::max(best, logits[i]);
  return best;
}

// The order every result here is given in: larger logit first, then lower token id.
bool ranks_before(const TokenLogit& a, const TokenLogit& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// Keeps the k best entries seen in a min-heap whose top is the worst kept one. Tokens arrive in
// increasing id, so a newcomer equal to the worst kept is worse (higher id) and stays out.
class TopKHeap {
 public:
  TopKHeap(int k, std::vector<TokenLogit>& storage) : k_(k), heap_(storage) {
    heap_.clear();
    heap_.reserve(static_cast<size_t>(k));
  }

  float threshold() const {
    return static_cast<int>(heap_.size()) < k_ ? -std::numeric_limits<float>::infinity()
                                               : heap_.front().logit;
  }
  bool full() const { return static_cast<int>(heap_.size()) == k_; }

  void offer(Token token, float logit) {
    if (!full()) {
      heap_.push_back({token, logit});
      std::push_heap(heap_.begin(), heap_.end(), worse_on_top);
    } else if (logit > heap_.front().logit) {
      std::pop_heap(heap_.begin(), heap_.end(), worse_on_top);
      heap_.back() = {token, logit};
      std::push_heap(heap_.begin(), heap_.end(), worse_on_top);
    }
  }

  void sort_best_first() { std::sort(heap_.begin(), heap_.end(), ranks_before); }

 private:
  // std's heaps keep the largest on top; "largest" under ranks_before is the worst kept entry.
  static bool worse_on_top(const TokenLogit& a, const TokenLogit& b) { return ranks_before(a, b); }

  int k_;
  std::vector<TokenLogit>& heap_;
};

}  // namespace

float max_logit(const float* logits, int count) { return block_max(logits, count); }

BRISK_VECTOR_CLONES Token first_argmax(const float* logits, int count) {
  // Per lane: the largest value and the first index holding it; then the lowest such index.
  Lanes best = splat(-std::numeric_limits<float>::infinity());
  IntLanes best_index{};
  IntLanes index{};
  for (int lane = 0; lane < kLanes; ++lane) index[lane] = lane;
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const Lanes value = load(logits + i);
    const IntLanes greater = value > best;
    best = greater ? value : best;
    best_index = greater ? index : best_index;
    index += kLanes;
  }
  float top = -std::numeric_limits<float>::infinity();
  Token top_index = 0;
  for (int lane = 0; lane < kLanes; ++lane) {
    if (best[lane] > top || (best[lane] == top && best_index[lane] < top_index)) {
      top = best[lane];
      top_index = best_index[lane];
    }
  }
  for (; i < count; ++i) {
    if (logits[i] > top) {
      top = logits[i];
      top_index = i;
    }
  }
  return top_index;
}

BRISK_VECTOR_CLONES void exp_scaled(const float* logits, int count, float shift, float scale,
                                    float* out, float floor) {
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const Lanes term = term_lanes(logits + i, shift, scale, floor);
    std::memcpy(out + i, &term, sizeof term);
  }
  for (; i < count; ++i) out[i] = term_one(logits[i], shift, scale, floor);
}

BRISK_VECTOR_CLONES double sum_exp_by_block(const float* logits, int count, float shift,
                                            float scale, std::vector<double>& block_sums,
                                            float floor) {
  block_sums.resize(static_cast<size_t>((count + kExpBlockSize - 1) / kExpBlockSize));
  double total = 0;
  for (int block = 0; block * kExpBlockSize < count; ++block) {
    const float* row = logits + static_cast<size_t>(block) * kExpBlockSize;
    const int size = std::min(kExpBlockSize, count - block * kExpBlockSize);
    Lanes sum_a{};
    Lanes sum_b{};
    int i = 0;
    for (; i + 2 * kLanes <= size; i += 2 * kLanes) {
      sum_a += term_lanes(row + i, shift, scale, floor);
      sum_b += term_lanes(row + i + kLanes, shift, scale, floor);
    }
    double sum = horizontal_sum(sum_a + sum_b);
    for (; i < size; ++i) sum += term_one(row[i], shift, scale, floor);
    block_sums[static_cast<size_t>(block)] = sum;
    total += sum;
  }
  return total;
}

void select_top_k(const float* logits, int count, int k, std::vector<TokenLogit>& out) {
  k = std::clamp(k, 0, count);
  TopKHeap heap(k, out);
  if (k == 0) return;
  // Most blocks hold nothing above the k-th best seen so far; a vector max rules them out.
  constexpr int kScanBlock = 64;
  for (int start = 0; start < count; start += kScanBlock) {
    const int size = std::min(kScanBlock, count - start);
    if (heap.full() && block_max(logits + start, size) <= heap.threshold()) continue;
    for (int i = start; i < start + size; ++i) {
      if (!heap.full() || logits[i] > heap.threshold()) heap.offer(i, logits[i]);
    }
  }
  heap.sort_best_first();
}

BRISK_VECTOR_CLONES void mass_histogram(const float* logits, int count, float max,
                                        std::vector<double>& buckets) {
  // Four interleaved copies, so consecutive entries in one bucket do not wait on each other.
  constexpr int kCopies = 4;
  thread_local std::vector<double> copies;
  copies.assign(static_cast<size_t>(kCopies * kMassBuckets), 0.0);
  float terms[kExpBlockSize];
  int32_t indices[kExpBlockSize];
  for (int start = 0; start < count; start += kExpBlockSize) {
    const int size = std::min(kExpBlockSize, count - start);
    const float* row = logits + start;
    int i = 0;
    for (; i + kLanes <= size; i += kLanes) {
      const Lanes logit = load(row + i);
      const Lanes term = exp_lanes(logit - max);
      std::memcpy(terms + i, &term, sizeof term);
      const Lanes distance = (max - logit) * static_cast<float>(kMassBucketsPerLogit);
      const Lanes capped = distance < static_cast<float>(kMassBuckets - 1)
                               ? distance
                               : splat(static_cast<float>(kMassBuckets - 1));
      const IntLanes index = __builtin_convertvector(capped, IntLanes);
      std::memcpy(indices + i, &index, sizeof index);
    }
    for (; i < size; ++i) {
      terms[i] = exp_one(row[i] - max);
      indices[i] = mass_bucket_of(row[i], max);
    }
    for (i = 0; i < size; ++i) {
      copies[static_cast<size_t>((i % kCopies) * kMassBuckets + indices[i])] += terms[i];
    }
  }
  buckets.assign(static_cast<size_t>(kMassBuckets), 0.0);
  for (int copy = 0; copy < kCopies; ++copy) {
    for (int bucket = 0; bucket < kMassBuckets; ++bucket) {
      buckets[static_cast<size_t>(bucket)] +=
          copies[static_cast<size_t>(copy * kMassBuckets + bucket)];
    }
  }
}

BRISK_VECTOR_CLONES void collect_mass_bucket(const float* logits, int count, float max, int bucket,
                                             std::vector<TokenLogit>& out) {
  out.clear();
  // Entries of this bucket lie within this logit range (widened against rounding); a vector
  // compare rules out the eight entries at a time that are outside it, which is almost all.
  const float highest = max - static_cast<float>(bucket) / kMassBucketsPerLogit + 1e-3f;
  const float lowest = bucket == kMassBuckets - 1
                           ? -std::numeric_limits<float>::infinity()
                           : max - static_cast<float>(bucket + 1) / kMassBucketsPerLogit - 1e-3f;
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    const Lanes logit = load(logits + i);
    const IntLanes inside = (logit >= lowest) & (logit <= highest);
    uint64_t words[sizeof inside / sizeof(uint64_t)];
    std::memcpy(words, &inside, sizeof inside);
    uint64_t any = 0;
    for (uint64_t word : words) any |= word;
    if (any == 0) continue;
    for (int lane = i; lane < i + kLanes; ++lane) {
      if (mass_bucket_of(logits[lane], max) == bucket) out.push_back({lane, logits[lane]});
    }
  }
  for (; i < count; ++i) {
    if (mass_bucket_of(logits[i], max) == bucket) out.push_back({i, logits[i]});
  }
  std::sort(out.begin(), out.end(), ranks_before);
}

}  // namespace brisk
