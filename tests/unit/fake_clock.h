#pragma once

// A clock that moves only when a test says so, for the scheduler's deadlines, aging, hold
// times and step costs (SchedulerOptions::clock). Safe to read from the engine thread while
// the test thread advances it.

#include <atomic>
#include <chrono>
#include <functional>

#include "common/clock.h"

namespace brisk::testing {

class FakeClock {
 public:
  TimePoint now() const { return TimePoint(Clock::duration(ticks_.load())); }
  void advance(Clock::duration by) { ticks_ += by.count(); }
  std::function<TimePoint()> function() {
    return [this] { return now(); };
  }

 private:
  // Far from the epoch, so "arrival minus a little" stays valid.
  std::atomic<Clock::rep> ticks_{
      std::chrono::duration_cast<Clock::duration>(std::chrono::hours(1)).count()};
};

}  // namespace brisk::testing
