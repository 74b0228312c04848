#include "common/arrival_schedule.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace brisk {
namespace {

// Calls `emit(offset_s)` for successive arrivals until it returns false.
template <class Emit>
void generate_arrivals(const ArrivalPattern& pattern, uint64_t seed, Emit emit) {
  std::mt19937_64 random(seed);
  const double mean_gap_s = 1.0 / pattern.rate;
  std::exponential_distribution<double> exponential(pattern.rate);
  std::gamma_distribution<double> gamma(pattern.burstiness, mean_gap_s / pattern.burstiness);
  double t = 0;
  while (emit(t)) {
    switch (pattern.process) {
      case ArrivalProcess::constant:
        t += mean_gap_s;
        break;
      case ArrivalProcess::poisson:
        t += exponential(random);
        break;
      case ArrivalProcess::gamma:
        t += gamma(random);
        break;
    }
  }
}

}  // namespace

std::vector<double> arrival_offsets_s(const ArrivalPattern& pattern, int count, uint64_t seed) {
  std::vector<double> offsets;
  if (std::isinf(pattern.rate)) return std::vector<double>(std::max(0, count), 0.0);
  generate_arrivals(pattern, seed, [&](double t) {
    if (static_cast<int>(offsets.size()) >= count) return false;
    offsets.push_back(t);
    return true;
  });
  return offsets;
}

std::vector<double> arrival_offsets_within_s(const ArrivalPattern& pattern, double duration_s,
                                             uint64_t seed) {
  std::vector<double> offsets;
  if (std::isinf(pattern.rate)) return offsets;
  generate_arrivals(pattern, seed, [&](double t) {
    if (t >= duration_s) return false;
    offsets.push_back(t);
    return true;
  });
  return offsets;
}

}  // namespace brisk
