#pragma once

#include <chrono>

namespace brisk {

// One monotonic clock for every latency brisk measures.
using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

inline double ms_between(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

inline double seconds_between(TimePoint from, TimePoint to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace brisk
