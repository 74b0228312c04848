#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/target_endpoint.h"
#include "doctor/evidence.h"
#include "telemetry/cpu_times.h"
#include "telemetry/nvml_sampler.h"
#include "telemetry/process_finder.h"
#include "telemetry/server_metrics.h"

namespace brisk::doctor {

// One reading of everything sampled, `t_s` seconds after the recorder started.
struct TelemetryReading {
  double t_s = 0;
  double host_busy_cores = 0;
  double server_cores = -1;
  double doctor_cores = 0;
  std::vector<double> gpu_utilization;
  std::vector<double> gpu_memory_used_bytes;  // per GPU, where NVML reported it
  std::optional<double> kv_usage;
  std::optional<double> waiting;
  std::optional<double> running;
};

// Samples /proc, NVML and the server's /metrics every `period` on a thread of its own while the
// probe runs, and sums them up for the Evidence. The probe's own thread never waits on it.
class TelemetryRecorder {
 public:
  // `server_pid` < 0: find the process listening on the target's port when the target is on
  // this machine.
  // `model`: the probed model, read alone from a server that labels its series by model.
  TelemetryRecorder(bench::TargetEndpoint target, int server_pid, std::string model = {},
                    std::chrono::milliseconds period = std::chrono::milliseconds(250));
  ~TelemetryRecorder();

  void start();
  void stop();
  // A synchronous scrape of /metrics (e.g. before and after one probe stage).
  std::optional<telemetry::ServerMetrics> scrape_now();

  HostSummary host_summary() const;
  GpuSummary gpu_summary() const;
  ServerMetricsSummary metrics_summary() const;
  std::vector<TelemetryReading> readings() const;
  // The zero of every reading's t_s.
  TimePoint started_at() const;
  int server_pid() const { return server_pid_; }

 private:
  void loop();
  void sample_once();
  std::map<int, std::pair<uint64_t, std::string>> process_ticks() const;

  bench::TargetEndpoint target_;
  int server_pid_;
  std::string model_;
  std::chrono::milliseconds period_;
  std::unique_ptr<telemetry::NvmlSampler> nvml_;
  std::string nvml_absent_;
  std::vector<telemetry::GpuLink> gpu_links_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;

  // Guarded by mutex_.
  TimePoint started_{};
  std::vector<TelemetryReading> readings_;
  std::vector<telemetry::GpuSample> gpu_peak_;
  std::optional<telemetry::CpuSnapshot> first_cpu_, last_cpu_;
  std::optional<telemetry::ProcessCpu> first_server_, last_server_, first_self_, last_self_;
  TimePoint first_at_{}, last_at_{};
  double memory_used_max_ = 0;
  double memory_total_bytes_ = 0;
  std::optional<telemetry::ServerMetrics> first_metrics_, last_metrics_;
  TimePoint first_metrics_at_{}, last_metrics_at_{};
  std::string metrics_absent_;
  ServerMetricsSummary metrics_peaks_;
  std::map<int, std::pair<uint64_t, std::string>> processes_at_start_, processes_at_end_;
  // The previous reading, for per-interval rates.
  std::optional<telemetry::CpuSnapshot> previous_cpu_;
  std::optional<telemetry::ProcessCpu> previous_server_, previous_self_;
  TimePoint previous_at_{};
};

// The host's CPU over the probe from its first and last /proc/stat readings: cores, busy
// cores, steal, iowait, the busiest core and each core's shares.
void summarize_host_cpu(const telemetry::CpuSnapshot& first, const telemetry::CpuSnapshot& last,
                        HostSummary& host);

// What `timeline` saw between `start_s` and `end_s` (seconds on its clock): the readings whose
// interval, from the reading before (or 0) to its own t_s, overlaps that window.
PointResources resources_during(const std::vector<TelemetryReading>& timeline, double start_s,
                                double end_s);

// True for addresses of this machine that a port lookup can trust (loopback, "localhost").
bool is_local_host(const std::string& host);

}  // namespace brisk::doctor
