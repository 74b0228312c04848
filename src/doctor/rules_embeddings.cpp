// Rules over the embeddings probe (`brisk doctor --endpoint embeddings`): whether the server
// batches inputs, whether its batching window costs more than it gives, and whether the CPU
// front end (tokenizing) or the model is the limit.
#include <algorithm>

#include <fmt/format.h>

#include "doctor/rules.h"

namespace brisk::doctor {

using namespace threshold;

namespace {

std::string point_source(const EmbeddingEvidence& probe, const EmbeddingPoint& point) {
  return fmt::format("probe {} c={}, client", probe.endpoint, point.concurrency);
}

std::string batcher_source(const EmbeddingEvidence& probe, const EmbeddingPoint& point,
                           const char* metric) {
  return fmt::format("/metrics {} over probe {} c={}", metric, probe.endpoint, point.concurrency);
}

bool is_brisk(const Evidence& evidence) { return evidence.metrics.dialect == "brisk"; }

}  // namespace

std::optional<Finding> embeddings_no_batching(const Evidence& evidence) {
  const EmbeddingEvidence& probe = evidence.embeddings;
  const EmbeddingPoint* first = probe.first();
  const EmbeddingPoint* top = probe.top();
  if (!first || !top || top->concurrency < 2 * first->concurrency || first->inputs_per_s <= 0 ||
      first->latency_ms.p50 <= 0) {
    return std::nullopt;
  }
  const double gain = top->inputs_per_s / first->inputs_per_s;
  const double in_flight = double(top->concurrency) * probe.inputs_per_request;
  const ServerMetricsSummary& metrics = evidence.metrics;
  Finding finding;
  finding.id = "no_batching";
  finding.severity = Severity::critical;
  finding.evidence = {
      {"throughput gain", gain, "x", point_source(evidence.embeddings, *top) + " / " + point_source(evidence.embeddings, *first)},
      {"latency p50 at the top", top->latency_ms.p50, "ms", point_source(evidence.embeddings, *top)},
      {"latency p50 alone", first->latency_ms.p50, "ms", point_source(evidence.embeddings, *first)}};
  if (top->batcher && top->batcher->batches > 0) {
    // The batcher says directly what went into each batch. Batches of one are no problem while
    // no input waits for the model (a device faster than the arrivals); inputs that queued
    // behind batches of one are.
    const EmbeddingBatcherDelta& batcher = *top->batcher;
    const double per_batch = batcher.inputs_per_batch();
    const double waited_ms = batcher.window_wait_ms_mean();
    if (in_flight < kEmbeddingQueuedMin || per_batch >= kEmbeddingBatchInputsMin ||
        waited_ms < 0.5 * batcher.compute_ms_per_batch()) {
      return std::nullopt;
    }
    finding.summary = fmt::format(
        "the model embeds about one input at a time: at {} concurrent requests ({:.0f} inputs "
        "in flight) its batches held {:.2f} inputs, while each input waited {:.1f} ms for one "
        "to start; throughput {:.1f} vs {:.1f} inputs/s alone",
        top->concurrency, in_flight, per_batch, waited_ms, top->inputs_per_s, first->inputs_per_s);
    finding.evidence.insert(
        finding.evidence.begin(),
        {{"inputs per batch", per_batch, "", batcher_source(evidence.embeddings, *top, "brisk_embedding_batch_inputs")},
         {"wait for a batch (mean)", waited_ms, "ms",
          batcher_source(evidence.embeddings, *top, "brisk_embedding_window_wait_seconds")}});
    finding.prescription =
        "let a batch take what queued: brisk serve --max-batch-tokens 0 (the model's context) "
        "or at least a few inputs' tokens, and no --preferred-batch-sizes of 1";
    finding.serve_flags = {"--max-batch-tokens", "0"};
  } else {
    // Without the batcher's counters, a running-requests gauge of one with requests waiting
    // says it. Flat throughput and latency growing with concurrency alone do not: a device
    // the model already fills at one client shows both while batching (on 2 CPU cores
    // llama-server -np 8 gained 1.12× from 1 to 4 clients, its -np 1 1.18×), so they count
    // only where the accelerator is seen idle meanwhile.
    const double serialized_ms = double(top->concurrency) / first->concurrency *
                                 first->latency_ms.p50 * kSerializedLatencyShare;
    const bool server_runs_one = metrics.running_max && *metrics.running_max <= 1 &&
                                 metrics.waiting_max && *metrics.waiting_max >= 1;
    const bool device_idle = top->resources.gpu_utilization_mean &&
                             *top->resources.gpu_utilization_mean < kGpuStarvedMax;
    const bool serialized = !metrics.running_max && device_idle && gain < kEmbeddingFlatGain &&
                            top->latency_ms.p50 >= serialized_ms;
    if (!server_runs_one && !serialized) return std::nullopt;
    finding.summary = fmt::format(
        "requests are embedded one after another: at {} concurrent a request takes {:.0f} ms "
        "(alone {:.0f} ms) and throughput stays at {:.1f} vs {:.1f} inputs/s alone",
        top->concurrency, top->latency_ms.p50, first->latency_ms.p50, top->inputs_per_s,
        first->inputs_per_s);
    if (metrics.running_max) {
      finding.evidence.push_back({"requests running (max)", *metrics.running_max, "",
                                  "/metrics (" + metrics.dialect + ")"});
    } else {
      finding.evidence.push_back({"GPU utilization (mean) at the top",
                                  *top->resources.gpu_utilization_mean, "fraction", "NVML"});
    }
    finding.prescription =
        "let the server batch: llama-server -np N (slots share one batch) with -ub at least N "
        "inputs' tokens; brisk serve batches whatever queued while the model ran";
  }
  finding.impact = 1.0 - static_cast<double>(first->concurrency) / top->concurrency;
  return finding;
}

std::optional<Finding> check_batch_window_too_long(const Evidence& evidence) {
  const EmbeddingPoint* alone = evidence.embeddings.first();
  if (!alone || !alone->batcher || alone->batcher->waited_inputs <= 0 ||
      alone->latency_ms.p50 <= 0) {
    return std::nullopt;
  }
  const EmbeddingBatcherDelta& batcher = *alone->batcher;
  const double wait_ms = batcher.window_wait_ms_mean();
  const double share = wait_ms / alone->latency_ms.p50;
  if (wait_ms < kWindowWaitMsMin || share < kWindowShareWarn) return std::nullopt;
  Finding finding;
  finding.id = "batch_window_too_long";
  finding.severity = share >= kWindowShareCritical ? Severity::critical : Severity::warning;
  finding.summary = fmt::format(
      "with one client, each input waits {:.1f} ms for its batch to start: {:.0f}% of a "
      "request's {:.1f} ms median, while the model computes a batch in {:.1f} ms and nothing "
      "else arrives to join it ({:.2f} inputs a batch)",
      wait_ms, share * 100, alone->latency_ms.p50, batcher.compute_ms_per_batch(),
      batcher.inputs_per_batch());
  finding.evidence = {
      {"wait for a batch (mean)", wait_ms, "ms",
       batcher_source(evidence.embeddings, *alone, "brisk_embedding_window_wait_seconds")},
      {"latency p50", alone->latency_ms.p50, "ms", point_source(evidence.embeddings, *alone)},
      {"model time a batch", batcher.compute_ms_per_batch(), "ms",
       batcher_source(evidence.embeddings, *alone, "brisk_embedding_batch_compute_seconds")},
      {"inputs per batch", batcher.inputs_per_batch(), "",
       batcher_source(evidence.embeddings, *alone, "brisk_embedding_batch_inputs")}};
  finding.prescription = fmt::format(
      "shorten the batching window: brisk serve --batch-window-ms 0 (the default) starts a "
      "batch as soon as the model is free, with every input that arrived while the last one "
      "ran; a window pays only where batches of one would run back to back on a device with "
      "idle width (sweep it with brisk bench --endpoint {} --rate R, docs/cli.md)",
      evidence.embeddings.endpoint);
  if (is_brisk(evidence)) finding.serve_flags = {"--batch-window-ms", "0"};
  finding.impact = std::min(1.0, share);
  return finding;
}

std::optional<Finding> embeddings_cpu_bound_frontend(const Evidence& evidence) {
  const EmbeddingPoint* top = evidence.embeddings.top();
  if (!top || !top->batcher || top->batcher->compute_ms <= 0) return std::nullopt;
  const EmbeddingBatcherDelta& batcher = *top->batcher;
  const double share = batcher.tokenize_ms / batcher.compute_ms;
  if (share < kTokenizeShareOfComputeWarn) return std::nullopt;
  Finding finding;
  finding.id = "cpu_bound_frontend";
  finding.severity =
      share >= kTokenizeShareOfComputeCritical ? Severity::critical : Severity::warning;
  finding.summary = fmt::format(
      "tokenizing costs {:.0f}% of the model's time: {:.2f} ms a request on the I/O threads "
      "against {:.1f} ms of model time a batch of {:.1f} inputs, at {} concurrent",
      share * 100, batcher.tokenize_ms_per_request(), batcher.compute_ms_per_batch(),
      batcher.inputs_per_batch(), top->concurrency);
  finding.evidence = {
      {"tokenize time", batcher.tokenize_ms, "ms",
       batcher_source(evidence.embeddings, *top, "brisk_embedding_tokenize_seconds")},
      {"model time", batcher.compute_ms, "ms",
       batcher_source(evidence.embeddings, *top, "brisk_embedding_batch_compute_seconds")},
      {"tokenize time a request", batcher.tokenize_ms_per_request(), "ms",
       batcher_source(evidence.embeddings, *top, "brisk_embedding_tokenize_seconds")}};
  if (top->resources.server_cores_mean) {
    finding.evidence.push_back({"server CPU (mean)", *top->resources.server_cores_mean, "cores",
                                fmt::format("/proc/{}/stat", evidence.host.server_pid)});
  }
  finding.prescription =
      "send token ids instead of text (`input` as arrays of integers: nothing to tokenize), "
      "give the front end more cores (brisk serve --io-threads N where cores are free), or "
      "shorten the inputs; a faster accelerator will not help";
  finding.impact = std::min(1.0, share / (1 + share));
  return finding;
}

std::optional<Finding> embeddings_compute_saturated(const Evidence& evidence) {
  const EmbeddingEvidence& probe = evidence.embeddings;
  const EmbeddingPoint* top = probe.top();
  if (!top || top == probe.first() || top->duration_s <= 0) return std::nullopt;
  Finding finding;
  finding.id = "compute_saturated";
  finding.severity = Severity::info;
  bool model_busy = false;
  if (top->batcher) {
    // The batcher's own clock: the share of the point the model spent computing batches.
    const double busy = top->batcher->compute_ms / (1000 * top->duration_s);
    model_busy = busy >= kGpuBusyMin;
    finding.evidence.push_back({"model busy", busy, "fraction",
                                batcher_source(evidence.embeddings, *top, "brisk_embedding_batch_compute_seconds")});
    finding.evidence.push_back({"inputs per batch", top->batcher->inputs_per_batch(), "",
                                batcher_source(evidence.embeddings, *top, "brisk_embedding_batch_inputs")});
  } else if (top->resources.gpu_utilization_mean) {
    model_busy = *top->resources.gpu_utilization_mean >= kGpuBusyMin;
    finding.evidence.push_back(
        {"GPU utilization (mean)", *top->resources.gpu_utilization_mean, "fraction", "NVML"});
  }
  if (!model_busy || probe.ramp_stop_reason != "plateau") return std::nullopt;
  finding.summary = fmt::format(
      "throughput stops growing at {:.1f} inputs/s ({} concurrent) while the model computes "
      "nearly all of the time",
      top->inputs_per_s, top->concurrency);
  finding.evidence.push_back(
      {"throughput at the top", top->inputs_per_s, "inputs/s", point_source(evidence.embeddings, *top)});
  finding.prescription =
      "more (or faster) accelerator, a smaller embedding model, or shorter inputs; replicas "
      "behind a load balancer (brisk plan --emit haproxy)";
  finding.impact = 0.5;
  return finding;
}

}  // namespace brisk::doctor
