#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace brisk {

// A Prometheus-style cumulative histogram. Thread-safe: the engine thread observes while
// HTTP threads render /metrics.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

  // Renders `name_bucket{le=..}`, `name_sum` and `name_count` lines (no HELP/TYPE header);
  // `labels` (such as `phase="decode"`) go on each line.
  std::string render_prometheus(const std::string& name, const std::string& labels = {}) const;

  static std::vector<double> latency_seconds_buckets();
  static std::vector<double> step_phase_seconds_buckets();

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> bucket_counts_;  // non-cumulative; last is the +Inf overflow
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace brisk
