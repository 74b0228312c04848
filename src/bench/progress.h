#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"

namespace brisk::bench {

// Counters a load runner bumps as requests start and end. Only the runner's thread writes them;
// the progress display reads them from its own thread, so relaxed atomics suffice.
struct PhaseCounters {
  // Clock::now() when the measured phase began, as nanoseconds since the clock's epoch; 0
  // while warmup requests run.
  std::atomic<int64_t> measured_since_ns{0};
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::atomic<int> failed{0};
  std::atomic<int> in_flight{0};
};

enum class ProgressStyle {
  off,
  bar,    // one line redrawn in place, 4 times a second: for a terminal
  lines,  // a plain line every 5 seconds: for logs and pipes
};

// `auto` picks `bar` when stderr is a terminal, else `lines`.
ProgressStyle progress_style_for(const std::string& choice);

// Shows the progress of one measured phase on stderr from a thread of its own, so the load
// runner's I/O thread never waits on the terminal.
class ProgressDisplay {
 public:
  // `total_requests` 0: unknown (a --duration run); `duration_s` 0: a --num-requests run.
  ProgressDisplay(ProgressStyle style, std::string label, int total_requests, double duration_s);
  ~ProgressDisplay();  // stops and prints the final state

  PhaseCounters& counters() { return counters_; }
  void stop();
  // Called by the runner as the measured phase (after warmup) begins.
  static void mark_measured_start(PhaseCounters& counters, TimePoint start);

 private:
  void loop();
  std::string status_line() const;

  ProgressStyle style_;
  std::string label_;
  int total_requests_;
  double duration_s_;
  PhaseCounters counters_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace brisk::bench
