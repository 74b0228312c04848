#include "bench/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace brisk::bench {

namespace {

constexpr int kBarWidth = 30;
constexpr auto kBarInterval = std::chrono::milliseconds(250);
constexpr auto kLineInterval = std::chrono::seconds(5);

}  // namespace

ProgressStyle progress_style_for(const std::string& choice) {
  if (choice == "off") return ProgressStyle::off;
  if (choice == "bar") return ProgressStyle::bar;
  if (choice == "lines") return ProgressStyle::lines;
  return isatty(STDERR_FILENO) ? ProgressStyle::bar : ProgressStyle::lines;
}

ProgressDisplay::ProgressDisplay(ProgressStyle style, std::string label, int total_requests,
                                 double duration_s)
    : style_(style),
      label_(std::move(label)),
      total_requests_(total_requests),
      duration_s_(duration_s) {
  if (style_ != ProgressStyle::off) thread_ = std::thread([this] { loop(); });
}

ProgressDisplay::~ProgressDisplay() { stop(); }

void ProgressDisplay::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (style_ == ProgressStyle::off) return;
  // The final state, on a line of its own, so the table that follows starts clean.
  const std::string clear = style_ == ProgressStyle::bar ? "\r\033[K" : "";
  std::fputs((clear + status_line() + "\n").c_str(), stderr);
}

void ProgressDisplay::loop() {
  const auto interval =
      style_ == ProgressStyle::bar ? std::chrono::milliseconds(kBarInterval) : kLineInterval;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    const std::string line = status_line();
    if (style_ == ProgressStyle::bar) {
      std::fputs(("\r\033[K" + line).c_str(), stderr);
    } else {
      std::fputs((line + "\n").c_str(), stderr);
    }
    std::fflush(stderr);
  }
}

void ProgressDisplay::mark_measured_start(PhaseCounters& counters, TimePoint start) {
  counters.measured_since_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count(),
      std::memory_order_relaxed);
}

std::string ProgressDisplay::status_line() const {
  const int64_t since_ns = counters_.measured_since_ns.load(std::memory_order_relaxed);
  if (since_ns == 0) return label_ + ": warmup requests...";
  const double elapsed_s =
      seconds_between(TimePoint(std::chrono::nanoseconds(since_ns)), Clock::now());
  const int finished = counters_.finished.load(std::memory_order_relaxed);
  const double fraction = total_requests_ > 0 ? double(finished) / total_requests_
                          : duration_s_ > 0   ? elapsed_s / duration_s_
                                              : 0.0;
  const std::string done_of =
      total_requests_ > 0
          ? fmt::format("{}/{} requests  {:.1f} s", finished, total_requests_, elapsed_s)
          : fmt::format("{} requests  {:.1f}/{:g} s", finished, std::min(elapsed_s, duration_s_),
                        duration_s_);
  const std::string counts = fmt::format("{}  in flight {}  failed {}", done_of,
                                         counters_.in_flight.load(std::memory_order_relaxed),
                                         counters_.failed.load(std::memory_order_relaxed));
  if (style_ != ProgressStyle::bar) return label_ + ": " + counts;
  const int filled = std::clamp(static_cast<int>(fraction * kBarWidth), 0, kBarWidth);
  return fmt::format("{} [{}{}] {}", label_, std::string(filled, '#'),
                     std::string(kBarWidth - filled, '.'), counts);
}

}  // namespace brisk::bench
