#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace brisk {

// The one percentile definition of brisk (bench's summaries, plan's burst simulation, the
// scripts in bench/): linear between the closest ranks, numpy.percentile's default, so p99 of 64
// samples is 0.37 of the way from the 63rd to the 64th smallest. `q` in [0, 100]; `sorted`
// ascending and non-empty.
inline double percentile_linear(const std::vector<double>& sorted, double q) {
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

}  // namespace brisk
