#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace brisk::bench {

// A length in tokens that may vary from request to request: "128" (fixed),
// "uniform:64:256" (every integer from 64 to 256 equally likely) or "normal:128:32" (mean 128,
// standard deviation 32, rounded, and clamped to at least 1 token).
struct LengthDistribution {
  enum class Kind { fixed, uniform, normal };
  Kind kind = Kind::fixed;
  double a = 128;  // fixed: the length; uniform: lowest; normal: mean
  double b = 0;    // uniform: highest; normal: standard deviation

  // The length for the request identified by `key`: the same key always gives the same length,
  // on every platform (no std:: distributions, whose output is implementation-defined).
  int sample(uint64_t key) const;
  double mean() const;
  // The longest length it draws: a normal one's mean + 3 standard deviations (1 draw in 740
  // is longer).
  int longest() const;
  bool is_fixed() const { return kind == Kind::fixed; }
  // The spec it was parsed from, normalized: "128", "uniform:64:256", "normal:128:32".
  std::string spec() const;

  static LengthDistribution fixed_at(int tokens) { return {Kind::fixed, double(tokens), 0}; }
};

// Parses a spec as above; nullopt with `error` saying what a valid one looks like.
std::optional<LengthDistribution> parse_length_distribution(const std::string& spec,
                                                            std::string& error);

// SplitMix64: a fixed, portable mix so the same seed gives the same workload everywhere.
uint64_t mix_bits(uint64_t x);
// A double in [0, 1) from the top 53 bits of `bits`.
inline double unit_interval(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace brisk::bench
