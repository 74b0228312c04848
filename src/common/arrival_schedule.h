#pragma once

#include <cstdint>
#include <vector>

namespace brisk {

// How an open-loop load spaces its requests. brisk bench sends on this schedule and brisk plan
// predicts it, so a plan given bench's seed and request count simulates the very arrivals that
// bench run sends.
enum class ArrivalProcess { constant, poisson, gamma };

struct ArrivalPattern {
  ArrivalProcess process = ArrivalProcess::poisson;
  double rate = 0;          // requests per second; infinity: everything at once
  double burstiness = 1.0;  // gamma shape: < 1 burstier than Poisson, 1 = Poisson
};

// Offsets in seconds from the first arrival at which each of `count` requests is due. Gaps have
// mean 1/rate: constant, exponential (Poisson) or gamma(shape = burstiness), drawn from
// std::mt19937_64(seed).
std::vector<double> arrival_offsets_s(const ArrivalPattern& pattern, int count, uint64_t seed);
// The same schedule, every arrival before `duration_s` (a finite rate only).
std::vector<double> arrival_offsets_within_s(const ArrivalPattern& pattern, double duration_s,
                                             uint64_t seed);

}  // namespace brisk
