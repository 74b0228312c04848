#include "doctor/telemetry_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "bench/server_scrape.h"
#include "telemetry/memory_info.h"
#include "telemetry/prometheus_text.h"

namespace brisk::doctor {

namespace {

const std::filesystem::path kProc = "/proc";

std::optional<telemetry::ProcessCpu> read_process(int pid) {
  if (pid < 0) return std::nullopt;
  const auto text = telemetry::read_small_file(kProc / std::to_string(pid) / "stat");
  return text ? telemetry::parse_process_stat(*text) : std::nullopt;
}

std::optional<telemetry::CpuSnapshot> read_cpu() {
  const auto text = telemetry::read_small_file(kProc / "stat");
  return text ? telemetry::parse_proc_stat(*text) : std::nullopt;
}

double ticks_per_second() {
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(ticks) : 100.0;
}

double cores_used(const telemetry::ProcessCpu& before, const telemetry::ProcessCpu& after,
                  double seconds) {
  if (seconds <= 0 || after.total_ticks() < before.total_ticks()) return 0;
  return static_cast<double>(after.total_ticks() - before.total_ticks()) / ticks_per_second() /
         seconds;
}

void raise_to(std::optional<double>& peak, const std::optional<double>& value) {
  if (value) peak = std::max(peak.value_or(*value), *value);
}

}  // namespace

void summarize_host_cpu(const telemetry::CpuSnapshot& first, const telemetry::CpuSnapshot& last,
                        HostSummary& host) {
  host.cores = static_cast<int>(std::max<size_t>(1, last.cores.size()));
  const telemetry::CpuShare all = telemetry::cpu_share_between(first.all, last.all);
  host.busy_cores_mean = all.busy() * host.cores;
  host.steal_fraction = all.steal;
  host.iowait_fraction = all.iowait;
  host.per_core = telemetry::numbered_core_shares_between(first, last);
  for (const telemetry::CoreShare& core : host.per_core) {
    host.busiest_core_fraction = std::max(host.busiest_core_fraction, core.share.busy());
  }
}

// Several models on one server: who held the device over the probe, and how long the probed
// model's steps waited for the others'.
void summarize_device_sharing(const telemetry::ServerMetrics& first,
                              const telemetry::ServerMetrics& last, double probe_seconds,
                              const std::string& model, ServerMetricsSummary& summary) {
  if (probe_seconds <= 0 || last.device_busy_seconds_by_model.size() < 2) return;
  double others = 0;
  for (const auto& [name, busy] : last.device_busy_seconds_by_model) {
    const auto before = first.device_busy_seconds_by_model.find(name);
    const double share =
        (busy - (before == first.device_busy_seconds_by_model.end() ? 0 : before->second)) /
        probe_seconds;
    if (name == model) {
      summary.own_busy_share = share;
      continue;
    }
    others += share;
    if (share > summary.busiest_other_share) {
      summary.busiest_other_share = share;
      summary.busiest_other_model = name;
    }
  }
  summary.others_busy_share = others;
  if (first.arbiter_wait_seconds_total && last.arbiter_wait_seconds_total &&
      first.arbiter_waits_total && last.arbiter_waits_total) {
    const double waited = *last.arbiter_wait_seconds_total - *first.arbiter_wait_seconds_total;
    const double steps = *last.arbiter_waits_total - *first.arbiter_waits_total;
    summary.arbiter_wait_share = waited / probe_seconds;
    if (steps > 0) summary.arbiter_wait_ms_mean = waited / steps * 1000;
  }
}

// Models loaded and unloaded on demand over the probe.
void summarize_model_swaps(const telemetry::ServerMetrics& first,
                           const telemetry::ServerMetrics& last, ServerMetricsSummary& summary) {
  if (last.model_loads_by_model.empty() && last.model_unloads_by_reason.empty()) return;
  const auto increase = [](const std::map<std::string, double>& before, const std::string& key,
                           double after) {
    const auto found = before.find(key);
    return after - (found == before.end() ? 0 : found->second);
  };
  double loads = 0;
  for (const auto& [model, count] : last.model_loads_by_model) {
    const double more = increase(first.model_loads_by_model, model, count);
    loads += more;
    if (more > summary.most_loaded_model_loads) {
      summary.most_loaded_model_loads = more;
      summary.most_loaded_model = model;
    }
  }
  summary.model_loads = loads;
  for (const auto& [reason, count] : last.model_unloads_by_reason) {
    const double more = increase(first.model_unloads_by_reason, reason, count);
    if (more > 0) summary.model_unloads_by_reason[reason] = more;
  }
  if (last.model_load_seconds_total) {
    summary.model_load_seconds =
        *last.model_load_seconds_total - first.model_load_seconds_total.value_or(0);
  }
}

bool is_local_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "0.0.0.0" || host.rfind("127.", 0) == 0;
}

TelemetryRecorder::TelemetryRecorder(bench::TargetEndpoint target, int server_pid,
                                     std::string model, std::chrono::milliseconds period)
    : target_(std::move(target)),
      server_pid_(server_pid),
      model_(std::move(model)),
      period_(period) {
  if (server_pid_ < 0 && is_local_host(target_.host)) {
    try {
      server_pid_ = telemetry::find_listening_process(kProc, std::stoi(target_.port)).value_or(-1);
    } catch (const std::exception&) {
      server_pid_ = -1;
    }
  }
  nvml_ = telemetry::NvmlSampler::open(nvml_absent_);
  if (nvml_) gpu_links_ = nvml_->topology();
}

TelemetryRecorder::~TelemetryRecorder() { stop(); }

void TelemetryRecorder::start() {
  {
    std::lock_guard lock(mutex_);
    started_ = Clock::now();
  }
  processes_at_start_ = process_ticks();
  sample_once();
  thread_ = std::thread([this] { loop(); });
}

void TelemetryRecorder::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  sample_once();
  processes_at_end_ = process_ticks();
}

void TelemetryRecorder::loop() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    sample_once();
    lock.lock();
  }
}

std::optional<telemetry::ServerMetrics> TelemetryRecorder::scrape_now() {
  std::string why_absent;
  std::optional<telemetry::ServerMetrics> scraped =
      bench::scrape_server_metrics(target_, model_, &why_absent);
  std::lock_guard lock(mutex_);
  if (!scraped) {
    metrics_absent_ = why_absent;
    return std::nullopt;
  }
  telemetry::ServerMetrics& metrics = *scraped;
  const TimePoint now = Clock::now();
  if (!first_metrics_) {
    first_metrics_ = metrics;
    first_metrics_at_ = now;
  }
  last_metrics_ = metrics;
  last_metrics_at_ = now;
  raise_to(metrics_peaks_.waiting_max, metrics.requests_waiting);
  raise_to(metrics_peaks_.running_max, metrics.requests_running);
  raise_to(metrics_peaks_.kv_usage_max, metrics.kv_usage_fraction);
  raise_to(metrics_peaks_.prefix_hit_rate, metrics.prefix_hit_rate);
  return metrics;
}

void TelemetryRecorder::sample_once() {
  const TimePoint now = Clock::now();
  const auto cpu = read_cpu();
  const auto server = read_process(server_pid_);
  const auto self = read_process(getpid());
  const auto meminfo_text = telemetry::read_small_file(kProc / "meminfo");
  const telemetry::MemoryInfo memory =
      meminfo_text ? telemetry::parse_meminfo(*meminfo_text).value_or(telemetry::MemoryInfo{})
                   : telemetry::MemoryInfo{};
  std::vector<telemetry::GpuSample> gpus =
      nvml_ ? nvml_->sample() : std::vector<telemetry::GpuSample>{};
  const auto metrics = scrape_now();

  std::lock_guard lock(mutex_);
  TelemetryReading reading;
  reading.t_s = seconds_between(started_, now);
  if (cpu && previous_cpu_) {
    const double elapsed = seconds_between(previous_at_, now);
    reading.host_busy_cores = telemetry::cpu_share_between(previous_cpu_->all, cpu->all).busy() *
                              std::max<size_t>(1, cpu->cores.size());
    if (server && previous_server_)
      reading.server_cores = cores_used(*previous_server_, *server, elapsed);
    if (self && previous_self_) reading.doctor_cores = cores_used(*previous_self_, *self, elapsed);
  }
  for (const telemetry::GpuSample& gpu : gpus) {
    reading.gpu_utilization.push_back(gpu.utilization_fraction.value_or(0));
    if (gpu.memory_used_bytes) reading.gpu_memory_used_bytes.push_back(*gpu.memory_used_bytes);
  }
  if (metrics) {
    reading.kv_usage = metrics->kv_usage_fraction;
    reading.waiting = metrics->requests_waiting;
    reading.running = metrics->requests_running;
  }
  if (previous_cpu_) readings_.push_back(reading);
  if (gpu_peak_.size() < gpus.size()) gpu_peak_ = gpus;
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto peak = [](std::optional<double>& into, const std::optional<double>& value) {
      raise_to(into, value);
    };
    peak(gpu_peak_[i].utilization_fraction, gpus[i].utilization_fraction);
    peak(gpu_peak_[i].memory_used_bytes, gpus[i].memory_used_bytes);
    peak(gpu_peak_[i].memory_total_bytes, gpus[i].memory_total_bytes);
    peak(gpu_peak_[i].sm_clock_mhz, gpus[i].sm_clock_mhz);
    peak(gpu_peak_[i].power_w, gpus[i].power_w);
    peak(gpu_peak_[i].pcie_tx_bytes_per_s, gpus[i].pcie_tx_bytes_per_s);
    peak(gpu_peak_[i].pcie_rx_bytes_per_s, gpus[i].pcie_rx_bytes_per_s);
    peak(gpu_peak_[i].nvlink_tx_bytes_per_s, gpus[i].nvlink_tx_bytes_per_s);
    peak(gpu_peak_[i].nvlink_rx_bytes_per_s, gpus[i].nvlink_rx_bytes_per_s);
    gpu_peak_[i].nvlinks_active = std::max(gpu_peak_[i].nvlinks_active, gpus[i].nvlinks_active);
  }
  if (memory.total_bytes > 0) {
    memory_used_max_ = std::max(memory_used_max_, memory.used_fraction());
    memory_total_bytes_ = static_cast<double>(memory.total_bytes);
  }
  if (cpu) {
    if (!first_cpu_) {
      first_cpu_ = cpu;
      first_at_ = now;
      first_server_ = server;
      first_self_ = self;
    }
    last_cpu_ = cpu;
    last_at_ = now;
    if (server) last_server_ = server;
    if (self) last_self_ = self;
  }
  previous_cpu_ = cpu;
  previous_server_ = server;
  previous_self_ = self;
  previous_at_ = now;
}

std::map<int, std::pair<uint64_t, std::string>> TelemetryRecorder::process_ticks() const {
  std::map<int, std::pair<uint64_t, std::string>> ticks;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(kProc, error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto text = telemetry::read_small_file(entry.path() / "stat");
    const auto cpu = text ? telemetry::parse_process_stat(*text) : std::nullopt;
    if (cpu) ticks[std::stoi(name)] = {cpu->total_ticks(), cpu->command};
  }
  return ticks;
}

HostSummary TelemetryRecorder::host_summary() const {
  std::lock_guard lock(mutex_);
  HostSummary host;
  host.server_pid = server_pid_;
  host.memory_used_fraction_max = memory_used_max_;
  host.memory_total_bytes = memory_total_bytes_;
  if (!first_cpu_ || !last_cpu_) return host;
  const double seconds = seconds_between(first_at_, last_at_);
  summarize_host_cpu(*first_cpu_, *last_cpu_, host);
  if (first_self_ && last_self_)
    host.doctor_cores_mean = cores_used(*first_self_, *last_self_, seconds);
  if (first_server_ && last_server_) {
    host.server_cores_mean = cores_used(*first_server_, *last_server_, seconds);
    host.server_threads = last_server_->threads;
    host.server_command = last_server_->command;
  }
  host.other_cores_mean = std::max(
      0.0, host.busy_cores_mean - std::max(0.0, host.server_cores_mean) - host.doctor_cores_mean);
  // The biggest other program over the whole probe, its processes summed (a build is many
  // short compiler processes; processes that started meanwhile count from zero).
  std::map<std::string, std::pair<double, int>> by_command;  // cores, processes
  for (const auto& [pid, end] : processes_at_end_) {
    if (pid == server_pid_ || pid == getpid()) continue;
    const auto start = processes_at_start_.find(pid);
    const uint64_t before = start == processes_at_start_.end() ? 0 : start->second.first;
    if (end.first <= before) continue;
    auto& [cores, count] = by_command[end.second];
    cores += static_cast<double>(end.first - before) / ticks_per_second() / std::max(1e-3, seconds);
    ++count;
  }
  for (const auto& [command, usage] : by_command) {
    if (usage.first <= host.top_other_cores) continue;
    host.top_other_cores = usage.first;
    host.top_other_process =
        usage.second == 1 ? command : fmt::format("{} ({} processes)", command, usage.second);
  }
  return host;
}

GpuSummary TelemetryRecorder::gpu_summary() const {
  std::lock_guard lock(mutex_);
  GpuSummary gpu;
  gpu.absent_reason = nvml_absent_;
  gpu.peak = gpu_peak_;
  gpu.links = gpu_links_;
  gpu.utilization_mean.assign(gpu_peak_.size(), 0);
  size_t counted = 0;
  for (const TelemetryReading& reading : readings_) {
    if (reading.gpu_utilization.size() != gpu_peak_.size()) continue;
    for (size_t i = 0; i < reading.gpu_utilization.size(); ++i) {
      gpu.utilization_mean[i] += reading.gpu_utilization[i];
    }
    ++counted;
  }
  for (double& mean : gpu.utilization_mean) mean = counted ? mean / counted : 0;
  return gpu;
}

ServerMetricsSummary TelemetryRecorder::metrics_summary() const {
  std::lock_guard lock(mutex_);
  ServerMetricsSummary summary = metrics_peaks_;
  if (!first_metrics_ || !last_metrics_) {
    summary.absent_reason = metrics_absent_.empty() ? "no /metrics scraped" : metrics_absent_;
    return summary;
  }
  summary.dialect = last_metrics_->dialect;
  if (first_metrics_->preemptions_total && last_metrics_->preemptions_total) {
    summary.preemptions = *last_metrics_->preemptions_total - *first_metrics_->preemptions_total;
  }
  if (first_metrics_->kv_full_blocks_total && last_metrics_->kv_full_blocks_total) {
    summary.kv_full_blocks =
        *last_metrics_->kv_full_blocks_total - *first_metrics_->kv_full_blocks_total;
  }
  summarize_device_sharing(*first_metrics_, *last_metrics_,
                           seconds_between(first_metrics_at_, last_metrics_at_), model_, summary);
  summarize_model_swaps(*first_metrics_, *last_metrics_, summary);
  summary.scraped_seconds = seconds_between(first_metrics_at_, last_metrics_at_);
  return summary;
}

std::vector<TelemetryReading> TelemetryRecorder::readings() const {
  std::lock_guard lock(mutex_);
  return readings_;
}

TimePoint TelemetryRecorder::started_at() const {
  std::lock_guard lock(mutex_);
  return started_;
}

PointResources resources_during(const std::vector<TelemetryReading>& timeline, double start_s,
                                double end_s) {
  PointResources resources;
  if (start_s < 0 || end_s < start_s) return resources;
  double gpu_utilization = 0, host_cores = 0, server_cores = 0;
  int gpu_readings = 0, server_readings = 0;
  double interval_start_s = 0;
  for (const TelemetryReading& reading : timeline) {
    const bool overlaps = interval_start_s <= end_s && reading.t_s >= start_s;
    interval_start_s = reading.t_s;
    if (!overlaps) continue;
    ++resources.readings;
    host_cores += reading.host_busy_cores;
    if (reading.server_cores >= 0) {
      server_cores += reading.server_cores;
      ++server_readings;
    }
    if (!reading.gpu_utilization.empty()) {
      for (double fraction : reading.gpu_utilization) gpu_utilization += fraction;
      gpu_readings += static_cast<int>(reading.gpu_utilization.size());
    }
    if (!reading.gpu_memory_used_bytes.empty()) {
      double used_bytes = 0;
      for (double bytes : reading.gpu_memory_used_bytes) used_bytes += bytes;
      resources.gpu_memory_used_bytes_max =
          std::max(resources.gpu_memory_used_bytes_max.value_or(0), used_bytes);
    }
  }
  if (resources.readings == 0) return resources;
  resources.host_busy_cores_mean = host_cores / resources.readings;
  if (server_readings > 0) resources.server_cores_mean = server_cores / server_readings;
  if (gpu_readings > 0) resources.gpu_utilization_mean = gpu_utilization / gpu_readings;
  return resources;
}

}  // namespace brisk::doctor
