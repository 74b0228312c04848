// Rules over the machine: the CPU shared with other processes, the accelerator's use, memory
// headroom and the links between GPUs.
#include <algorithm>

#include <fmt/format.h>

#include "doctor/rules.h"

namespace brisk::doctor {

using namespace threshold;

namespace {

double busiest_gpu_mean(const GpuSummary& gpu) {
  double busiest = 0;
  for (double value : gpu.utilization_mean) busiest = std::max(busiest, value);
  return busiest;
}

}  // namespace

std::optional<Finding> check_cpu_contention(const Evidence& evidence) {
  const HostSummary& host = evidence.host;
  if (host.server_pid < 0 || host.cores <= 0) return std::nullopt;
  const double other_share = host.other_cores_mean / host.cores;
  const bool others_busy =
      host.other_cores_mean >= kOtherCoresMin && other_share >= kOtherShareMin;
  const bool stolen = host.steal_fraction >= kStealFractionMin;
  if (!others_busy && !stolen) return std::nullopt;
  Finding finding{"cpu_contention", other_share >= 0.5 ? Severity::critical : Severity::warning,
                  "", {}, "", 0, {}};
  finding.summary =
      others_busy
          ? fmt::format("other processes took {:.1f} of {} cores while the server ran{}",
                        host.other_cores_mean, host.cores,
                        host.top_other_process.empty()
                            ? ""
                            : fmt::format(" (most: {}, {:.1f} cores)", host.top_other_process,
                                          host.top_other_cores))
          : fmt::format("the hypervisor took {:.0f}% of the CPU time (steal)",
                        host.steal_fraction * 100);
  finding.evidence = {
      {"other processes' CPU (mean)", host.other_cores_mean, "cores", "/proc/stat − server − doctor"},
      {"server CPU (mean)", host.server_cores_mean, "cores",
       fmt::format("/proc/{}/stat", host.server_pid)},
      {"brisk doctor's own CPU (mean)", host.doctor_cores_mean, "cores", "/proc/self/stat"},
      {"steal", host.steal_fraction, "fraction", "/proc/stat"}};
  if (!host.top_other_process.empty()) {
    finding.evidence.push_back({"busiest other process: " + host.top_other_process,
                                host.top_other_cores, "cores", "/proc/*/stat"});
  }
  finding.prescription =
      "give the server its cores: move the competing work elsewhere, or pin them apart "
      "(taskset/cgroups cpusets) and set brisk serve --threads to the cores the server owns "
      "(llama-server -t); spinning compute threads on shared cores slow each other many times "
      "over";
  finding.impact = std::min(1.0, std::max(other_share, host.steal_fraction));
  return finding;
}

std::optional<Finding> check_noisy_neighbour(const Evidence& evidence) {
  const ServerMetricsSummary& metrics = evidence.metrics;
  if (!metrics.others_busy_share || !metrics.arbiter_wait_share) return std::nullopt;
  if (*metrics.others_busy_share < kNeighbourBusyShareMin ||
      *metrics.arbiter_wait_share < kArbiterWaitShareMin) {
    return std::nullopt;
  }
  const double waited = *metrics.arbiter_wait_share;
  Finding finding{"noisy_neighbour",
                  waited >= kArbiterWaitShareCritical ? Severity::critical : Severity::warning,
                  "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "another model on the same device slowed this one: '{}' held the device {:.0f}% of the "
      "probe, and '{}''s steps spent {:.0f}% of it waiting for the device{}",
      metrics.busiest_other_model, metrics.busiest_other_share * 100, evidence.model,
      waited * 100,
      metrics.arbiter_wait_ms_mean
          ? fmt::format(" ({:.1f} ms per step on average)", *metrics.arbiter_wait_ms_mean)
          : "");
  const std::string source = "/metrics, over the probe";
  finding.evidence = {
      {"other models' device time", *metrics.others_busy_share, "fraction of the probe",
       source + " (brisk_device_busy_seconds_total)"},
      {"busiest other model: " + metrics.busiest_other_model, metrics.busiest_other_share,
       "fraction of the probe", source},
      {"this model's steps waiting for the device", waited, "fraction of the probe",
       source + " (brisk_arbiter_wait_seconds)"}};
  if (metrics.own_busy_share) {
    finding.evidence.push_back({"this model's device time", *metrics.own_busy_share,
                                "fraction of the probe", source});
  }
  if (metrics.arbiter_wait_ms_mean) {
    finding.evidence.push_back(
        {"wait per step (mean)", *metrics.arbiter_wait_ms_mean, "ms", source});
  }
  finding.prescription = fmt::format(
      "keep '{}' fast beside '{}': mark it `critical = true` in brisk serve --models FILE (its "
      "steps then go first), or give it a larger `weight`; cap '{}' with its own "
      "`max-batched-tokens` (how long each of its steps holds the device) and `max-seqs`; or "
      "serve the two from separate devices or replicas",
      evidence.model, metrics.busiest_other_model, metrics.busiest_other_model);
  // Of the time its steps took on and off the device, the part spent waiting.
  finding.impact = std::min(1.0, waited / (waited + metrics.own_busy_share.value_or(0)));
  return finding;
}

std::optional<Finding> check_model_swap_thrash(const Evidence& evidence) {
  const ServerMetricsSummary& metrics = evidence.metrics;
  if (!metrics.model_loads || *metrics.model_loads < kSwapLoadsMin) return std::nullopt;
  double unloads = 0;
  for (const auto& [reason, count] : metrics.model_unloads_by_reason) unloads += count;
  if (unloads < 1) return std::nullopt;
  const double load_seconds = metrics.model_load_seconds.value_or(0);
  const double load_share =
      metrics.scraped_seconds > 0 ? load_seconds / metrics.scraped_seconds : 0;
  Finding finding{"model_swap_thrash",
                  load_share >= kSwapLoadShareCritical ? Severity::critical : Severity::warning,
                  "", {}, "", 0, {}};
  const auto unloaded = [&](const char* reason) {
    const auto found = metrics.model_unloads_by_reason.find(reason);
    return found == metrics.model_unloads_by_reason.end() ? 0.0 : found->second;
  };
  finding.summary = fmt::format(
      "models were swapped in and out during the probe: {:.0f} loads ('{}' {:.0f} times) and "
      "{:.0f} unloads, {:.1f} s of loading; each request that named an unloaded model waited "
      "for its load",
      *metrics.model_loads,
      metrics.most_loaded_model.empty() ? evidence.model : metrics.most_loaded_model,
      metrics.most_loaded_model_loads, unloads, load_seconds);
  const std::string source = "/metrics, over the probe";
  finding.evidence = {
      {"model loads (not at start)", *metrics.model_loads, "loads",
       source + " (brisk_model_loads_total)"},
      {"time spent loading", load_seconds, "s", source + " (brisk_model_load_seconds)"}};
  for (const auto& [reason, count] : metrics.model_unloads_by_reason) {
    finding.evidence.push_back({"unloads: " + reason, count, "unloads",
                                source + " (brisk_model_unloads_total)"});
  }
  std::vector<std::string> fixes;
  if (unloaded("memory") > 0) {
    fixes.push_back(
        "raise brisk serve --memory-budget to hold the models used together (the sum of "
        "their memory_bytes in /v1/models), or lower their --ctx-size or --cache-ram so they "
        "fit");
  }
  if (unloaded("keep_alive") > 0) {
    fixes.push_back("lengthen --keep-alive past the gaps between the model's requests");
  }
  if (unloaded("api") > 0) {
    fixes.push_back("stop unloading it with POST /models/unload while it is in use");
  }
  fixes.push_back(
      "mark the model that must answer at once `pinned = true` in the --models file, or serve "
      "the models from separate replicas");
  finding.prescription = fixes.front();
  for (size_t i = 1; i < fixes.size(); ++i) finding.prescription += "; " + fixes[i];
  finding.impact = std::min(1.0, std::max(0.2, load_share));
  return finding;
}

std::optional<Finding> check_cpu_bound_frontend(const Evidence& evidence) {
  if (evidence.embeddings.probed()) return embeddings_cpu_bound_frontend(evidence);
  const HostSummary& host = evidence.host;
  if (!evidence.gpu.present() || host.server_cores_mean < kFrontendCoresMin) return std::nullopt;
  const double gpu_busy = busiest_gpu_mean(evidence.gpu);
  if (gpu_busy >= kGpuStarvedMax || gpu_busy <= kGpuIdleMax) return std::nullopt;
  Finding finding{"cpu_bound_frontend", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "the accelerator waits for the CPU: {:.0f}% GPU utilization while the server process "
      "uses {:.1f} cores (HTTP, tokenization, scheduling, detokenization)",
      gpu_busy * 100, host.server_cores_mean);
  finding.evidence = {{"GPU utilization (mean)", gpu_busy, "fraction", "NVML"},
                      {"server CPU (mean)", host.server_cores_mean, "cores",
                       fmt::format("/proc/{}/stat", host.server_pid)},
                      {"server threads", double(host.server_threads), "", "/proc/PID/stat"}};
  finding.prescription =
      "take work off the server's CPU path: more API-server processes (vLLM "
      "--api-server-count), a faster tokenizer, fewer and larger stream chunks, or a CPU with "
      "faster cores; brisk serve keeps tokenization off the engine thread";
  finding.impact = 1.0 - gpu_busy;
  return finding;
}

std::optional<Finding> check_model_on_cpu(const Evidence& evidence) {
  const HostSummary& host = evidence.host;
  if (!evidence.gpu.present() || host.server_cores_mean < 1.0) return std::nullopt;
  const double gpu_busy = busiest_gpu_mean(evidence.gpu);
  if (gpu_busy > kGpuIdleMax) return std::nullopt;
  Finding finding{"model_on_cpu", Severity::critical, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "the model runs on the CPU: the GPU stayed idle ({:.0f}% utilization) while the server "
      "used {:.1f} cores",
      gpu_busy * 100, host.server_cores_mean);
  finding.evidence = {{"GPU utilization (mean)", gpu_busy, "fraction", "NVML"},
                      {"server CPU (mean)", host.server_cores_mean, "cores",
                       fmt::format("/proc/{}/stat", host.server_pid)}};
  const ProbePoint* first = ramp_first(evidence);
  if (first && evidence.floor.decode_ms_per_token > 0) {
    finding.evidence.push_back({"ITL p50 alone", first->itl_ms.p50, "ms", "probe ramp c=1"});
    finding.evidence.push_back(
        {"decode floor", evidence.floor.decode_ms_per_token, "ms/token", evidence.floor.source});
  }
  finding.prescription =
      "offload the layers: brisk serve --gpu-layers 999 on the CUDA build (make cuda); "
      "llama-server -ngl 99; check CUDA_VISIBLE_DEVICES and that the server's build has a GPU "
      "backend";
  finding.impact = 1.0;
  return finding;
}

std::optional<Finding> check_memory_headroom_low(const Evidence& evidence) {
  Finding finding{"memory_headroom_low", Severity::warning, "", {}, "", 0, {}};
  double worst = 0;
  for (const telemetry::GpuSample& gpu : evidence.gpu.peak) {
    if (!gpu.memory_used_bytes || !gpu.memory_total_bytes || *gpu.memory_total_bytes <= 0) continue;
    const double used = *gpu.memory_used_bytes / *gpu.memory_total_bytes;
    if (used < kMemoryUsedWarn) continue;
    worst = std::max(worst, used);
    finding.evidence.push_back(
        {fmt::format("GPU {} memory used (peak)", gpu.index), used, "fraction", "NVML"});
  }
  const double host_used = evidence.host.memory_used_fraction_max;
  if (host_used >= kHostMemoryUsedWarn) {
    worst = std::max(worst, host_used);
    finding.evidence.push_back({"host memory used (peak)", host_used, "fraction", "/proc/meminfo"});
  }
  if (finding.evidence.empty()) return std::nullopt;
  if (worst >= kMemoryUsedCritical) finding.severity = Severity::critical;
  finding.summary = fmt::format(
      "only {:.0f}% of memory is left at peak (keep ~30%: below 20% a longer prompt or a burst "
      "runs out)",
      (1 - worst) * 100);
  finding.prescription =
      "leave headroom: a smaller KV cache (brisk serve --ctx-size; vLLM "
      "--gpu-memory-utilization 0.8, which pre-allocates on purpose), a smaller quantization, or "
      "a device with more memory (brisk plan)";
  finding.impact = std::min(1.0, (worst - kMemoryUsedWarn) / (1 - kMemoryUsedWarn));
  return finding;
}

std::optional<Finding> check_interconnect_limited(const Evidence& evidence) {
  const GpuSummary& gpu = evidence.gpu;
  if (gpu.peak.size() < 2) return std::nullopt;
  int busy = 0;
  for (double value : gpu.utilization_mean) busy += value >= 0.3 ? 1 : 0;
  if (busy < 2) return std::nullopt;  // one GPU working: nothing crosses the link
  Finding finding{"interconnect_limited", Severity::warning, "", {}, "", 0, {}};
  for (const telemetry::GpuLink& link : gpu.links) {
    if (link.kind == "NVLink" || link.kind == "unknown") continue;
    const double pcie = gpu.peak[link.first].pcie_rx_bytes_per_s.value_or(0) +
                        gpu.peak[link.first].pcie_tx_bytes_per_s.value_or(0);
    finding.evidence.push_back({fmt::format("GPU {} <-> GPU {} over {} (PCIe), GPU {} PCIe peak",
                                            link.first, link.second, link.kind, link.first),
                                pcie / 1e9, "GB/s", "NVML topology + PCIe counters"});
  }
  if (finding.evidence.empty()) return std::nullopt;
  finding.summary = fmt::format(
      "{} busy GPUs exchange activations over PCIe, not NVLink: tensor parallelism pays for it "
      "on every layer",
      busy);
  finding.prescription =
      "run one replica per GPU (data parallel) or pipeline parallelism across PCIe-linked GPUs; "
      "keep tensor parallelism inside an NVLink domain (nvidia-smi topo -m shows which)";
  finding.impact = 0.4;
  return finding;
}

}  // namespace brisk::doctor
