#include "doctor/probe_embeddings.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "bench/run_statistics.h"
#include "doctor/probe_stages.h"
#include "doctor/rules.h"

namespace brisk::doctor {

namespace {

// Requests of a ramp point per client: enough that each client's first request (which meets an
// empty queue) is not most of the point.
constexpr int kRequestsPerClient = 8;

std::optional<EmbeddingBatcherDelta> batcher_delta(
    const std::optional<telemetry::ServerMetrics>& before,
    const std::optional<telemetry::ServerMetrics>& after) {
  if (!before || !after || !before->embedding || !after->embedding) return std::nullopt;
  const auto& a = *before->embedding;
  const auto& b = *after->embedding;
  EmbeddingBatcherDelta delta;
  delta.batches = b.batches - a.batches;
  delta.batch_inputs = b.batch_inputs - a.batch_inputs;
  delta.compute_ms = 1000 * (b.compute_seconds - a.compute_seconds);
  delta.window_wait_ms = 1000 * (b.window_wait_seconds - a.window_wait_seconds);
  delta.waited_inputs = b.waited_inputs - a.waited_inputs;
  delta.tokenize_ms = 1000 * (b.tokenize_seconds - a.tokenize_seconds);
  delta.tokenized_requests = b.tokenized_requests - a.tokenized_requests;
  return delta;
}

class EmbeddingProbe {
 public:
  EmbeddingProbe(const ProbeOptions& options, Stages& stages, TelemetryRecorder& telemetry)
      : options_(options),
        stages_(stages),
        telemetry_(telemetry),
        workload_(stages.synthetic(options.workload.short_input_tokens, 1, 1,
                                   options.endpoint, options.inputs_per_request)) {}

  // One closed-loop point, with what the batcher did during it alone.
  EmbeddingPoint point(const std::string& stage, int concurrency, int requests,
                       bench::RunResult* result = nullptr) {
    const auto before = telemetry_.scrape_now();
    bench::RunResult run = stages_.run(fmt::format("embeddings c={}", concurrency), *workload_,
                                       concurrency, requests);
    const auto after = telemetry_.scrape_now();
    const bench::RunStatistics stats =
        bench::compute_run_statistics(run.records, run.start, run.end);
    EmbeddingPoint point;
    point.stage = stage;
    point.concurrency = concurrency;
    point.ok = stats.ok;
    point.failed = stats.failed;
    point.latency_ms = stats.e2e_ms;
    point.inputs_per_s = stats.embedding_throughput;
    point.duration_s = stats.duration_s;
    if (point.ok + point.failed > 0) std::tie(point.start_s, point.end_s) = stages_.window(run);
    point.batcher = batcher_delta(before, after);
    if (result) *result = std::move(run);
    return point;
  }

  void ramp(EmbeddingEvidence& evidence) {
    double previous_duration_s = std::max(evidence.ramp.back().duration_s, 0.05);
    for (int concurrency = 2;; concurrency *= 2) {
      if (concurrency > options_.max_concurrency) {
        evidence.ramp_stop_reason = "max_concurrency";
        return;
      }
      // Twice the requests at twice the concurrency: at worst (no batching) twice as long. The
      // first doubling always runs: without it no rule can tell whether the server batches.
      if (concurrency > 2 && 2 * previous_duration_s > stages_.remaining_s()) {
        evidence.ramp_stop_reason = "budget";
        return;
      }
      bench::RunResult run;
      EmbeddingPoint next = point("ramp", concurrency, kRequestsPerClient * concurrency, &run);
      if (next.ok + next.failed == 0) {
        evidence.ramp_stop_reason = "budget";
        return;
      }
      const double before_inputs_per_s = evidence.ramp.back().inputs_per_s;
      evidence.ramp.push_back(std::move(next));
      const EmbeddingPoint& added = evidence.ramp.back();
      previous_duration_s = std::max(added.duration_s, 0.05);
      if (!added.measured()) {
        evidence.ramp_stop_reason = "failures";
        return;
      }
      if (!slo_misses(options_.slo, run).empty()) {
        evidence.ramp_stop_reason = "slo";
        return;
      }
      // Past 4 clients only: the first doublings show whether the server batches at all even
      // where the device is already full at one.
      if (concurrency >= 4 && added.inputs_per_s < threshold::kRampPlateauGain * before_inputs_per_s) {
        evidence.ramp_stop_reason = "plateau";
        return;
      }
    }
  }

 private:
  const ProbeOptions& options_;
  Stages& stages_;
  TelemetryRecorder& telemetry_;
  std::unique_ptr<bench::SyntheticWorkload> workload_;
};

}  // namespace

std::optional<ProbeOutcome> run_embedding_probe(const ProbeOptions& options, std::string& error) {
  const bench::TokenCalibration calibration =
      bench::calibrate_tokens(options.target, options.model, std::chrono::seconds(10));
  TelemetryRecorder telemetry(options.target, options.server_pid, options.model);
  telemetry.start();
  Stages stages(options, calibration, telemetry.started_at());
  EmbeddingProbe probe(options, stages, telemetry);
  ProbeOutcome outcome;
  Evidence& evidence = outcome.evidence;
  evidence.budget_s = options.budget_s;
  evidence.workload = options.workload;
  EmbeddingEvidence& embeddings = evidence.embeddings;
  embeddings.endpoint = bench::pooling_route_name(options.endpoint);
  embeddings.input_tokens = options.workload.short_input_tokens;
  embeddings.inputs_per_request = options.inputs_per_request;

  bench::RunResult cold_run;
  embeddings.cold = probe.point("cold", 1, 1, &cold_run);
  if (!embeddings.cold.measured()) {
    telemetry.stop();
    const bench::RequestRecord& record = cold_run.records.back();
    error = fmt::format("the first {} request to {} failed ({}: {})", embeddings.endpoint,
                        options.target.url(), bench::error_name(record.error),
                        record.error_detail);
    return std::nullopt;
  }
  // The baseline takes at most a quarter of the budget, at what the cold request cost.
  const double cold_s = embeddings.cold.latency_ms.p50 / 1000;
  embeddings.ramp.push_back(
      probe.point("ramp", 1, fit_requests(16, cold_s, stages.remaining_s() / 4, 4)));
  if (!embeddings.ramp.back().measured()) {
    embeddings.ramp_stop_reason = "failures";
  } else {
    probe.ramp(embeddings);
  }
  telemetry.stop();
  evidence.elapsed_s = stages.elapsed_s();
  evidence.url = options.target.url();
  evidence.model = options.model;
  evidence.metrics = telemetry.metrics_summary();
  evidence.host = telemetry.host_summary();
  evidence.gpu = telemetry.gpu_summary();
  outcome.timeline = telemetry.readings();
  embeddings.cold.resources =
      resources_during(outcome.timeline, embeddings.cold.start_s, embeddings.cold.end_s);
  for (EmbeddingPoint& point : embeddings.ramp) {
    point.resources = resources_during(outcome.timeline, point.start_s, point.end_s);
  }
  return outcome;
}

}  // namespace brisk::doctor
