#include "common/histogram.h"

#include <fmt/format.h>

#include <algorithm>

namespace brisk {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  const size_t bucket = static_cast<size_t>(it - upper_bounds_.begin());
  std::lock_guard lock(mutex_);
  ++bucket_counts_[bucket];
  ++count_;
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.upper_bounds = upper_bounds_;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t c : bucket_counts_) {
    running += c;
    snap.cumulative_counts.push_back(running);
  }
  snap.count = count_;
  snap.sum = sum_;
  return snap;
}

std::string Histogram::render_prometheus(const std::string& name, const std::string& labels) const {
  const Snapshot snap = snapshot();
  const std::string bucket_prefix = labels.empty() ? "" : labels + ",";
  const std::string own_labels = labels.empty() ? "" : "{" + labels + "}";
  std::string out;
  for (size_t i = 0; i < snap.upper_bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, bucket_prefix, snap.upper_bounds[i],
                       snap.cumulative_counts[i]);
  }
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, bucket_prefix,
                     snap.cumulative_counts.back());
  out += fmt::format("{}_sum{} {}\n", name, own_labels, snap.sum);
  out += fmt::format("{}_count{} {}\n", name, own_labels, snap.count);
  return out;
}

std::vector<double> Histogram::latency_seconds_buckets() {
  // Same spirit as vLLM's: fine resolution where token latencies live (ms), coarse up to minutes.
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
          0.05,  0.075,  0.1,   0.15,   0.2,  0.3,   0.4,  0.5,   0.75, 1.0,
          2.5,   5.0,    7.5,   10.0,   20.0, 40.0,  80.0, 160.0, 640.0};
}

std::vector<double> Histogram::step_phase_seconds_buckets() {
  // Sampling and bookkeeping take tens of microseconds per step; decode takes milliseconds.
  std::vector<double> buckets = {0.00005, 0.0001, 0.00025, 0.0005};
  for (double bound : latency_seconds_buckets()) buckets.push_back(bound);
  return buckets;
}

}  // namespace brisk
