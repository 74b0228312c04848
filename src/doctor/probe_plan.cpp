#include "doctor/probe_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "bench/load_runner.h"
#include "bench/run_statistics.h"
#include "doctor/probe_embeddings.h"
#include "doctor/probe_point.h"
#include "doctor/probe_stages.h"
#include "doctor/probe_workloads.h"
#include "doctor/rules.h"

namespace brisk::doctor {

namespace {

// Time kept back from the ramp for the stages after it, in long-prompt requests (the prefix
// probe sends three, the mixed one two among short streams).
constexpr double kLongRequestsAfterRamp = 5;

void run_ramp(const ProbeOptions& options, Stages& stages, const bench::Workload& shorts,
              double reserve_s, Evidence& evidence) {
  evidence.ramp.push_back(evidence.short_baseline);
  evidence.ramp.back().stage = "ramp";
  double previous_duration_s = evidence.short_baseline.duration_s;
  for (int concurrency = 2;; concurrency *= 2) {
    if (concurrency > options.max_concurrency) {
      evidence.ramp_stop_reason = "max_concurrency";
      return;
    }
    // Twice the requests at twice the concurrency: at worst (no batching) twice as long.
    // The first doubling always runs: without it no rule can tell whether the server batches.
    const double estimate_s = 2 * std::max(previous_duration_s, 0.1);
    if (concurrency > 2 && estimate_s > stages.remaining_s() - reserve_s) {
      evidence.ramp_stop_reason = "budget";
      return;
    }
    const bench::RunResult run =
        stages.run(fmt::format("ramp c={}", concurrency), shorts, concurrency, 2 * concurrency);
    const ProbePoint point = stages.summarize("ramp", concurrency, run);
    if (point.ok + point.failed == 0) {  // the budget ended before a request could start
      evidence.ramp_stop_reason = "budget";
      return;
    }
    const ProbePoint& before = evidence.ramp.back();
    evidence.ramp.push_back(point);
    previous_duration_s = point.duration_s;
    if (!point.measured()) {
      evidence.ramp_stop_reason = "failures";
      return;
    }
    if (!slo_misses(options.slo, run).empty()) {
      evidence.ramp_stop_reason = "slo";
      return;
    }
    if (point.output_tokens_per_s < threshold::kRampPlateauGain * before.output_tokens_per_s) {
      evidence.ramp_stop_reason = "plateau";
      return;
    }
  }
}

// The tokens every repeated-prefix prompt starts with; 0 when the workload shares none.
int shared_prefix_tokens(const ProbeLengths& lengths) {
  return static_cast<int>(std::lround(lengths.long_input_tokens * lengths.shared_prefix_fraction));
}

void run_prefix_probe(const ProbeOptions& options, Stages& stages, TelemetryRecorder& telemetry,
                      Evidence& evidence) {
  const ProbeLengths& lengths = options.workload;
  const int shared_tokens = shared_prefix_tokens(lengths);
  const int tail_tokens = std::max(8, lengths.long_input_tokens - shared_tokens);
  const std::string shared = stages.synthetic(shared_tokens, 1, 71)->prompt(0, 0);
  SharedPrefixWorkload workload(options.target.route("/v1/completions"), shared,
                                stages.synthetic(tail_tokens, 1, 72), lengths.long_output_tokens);
  const auto before = telemetry.scrape_now();
  // The first request puts the prefix in the cache; the measured ones can reuse it.
  const bench::RunResult run = stages.run("repeated prefix", workload, 1, 2, /*warmup=*/1);
  const auto after = telemetry.scrape_now();
  evidence.prefix = stages.summarize("prefix", 1, run);
  evidence.prefix_shared_fraction =
      static_cast<double>(shared_tokens) / (shared_tokens + tail_tokens);
  if (before && after && before->prefix_query_tokens_total && after->prefix_query_tokens_total) {
    evidence.metrics.prefix_query_tokens =
        *after->prefix_query_tokens_total - *before->prefix_query_tokens_total;
    evidence.metrics.prefix_hit_tokens =
        after->prefix_hit_tokens_total.value_or(0) - before->prefix_hit_tokens_total.value_or(0);
  }
}

void run_mixed_probe(const ProbeOptions& options, Stages& stages, Evidence& evidence) {
  const int concurrency = std::max(2, std::min(4, options.max_concurrency));
  const ProbeLengths& lengths = options.workload;
  MixedWorkload workload(
      stages.synthetic(lengths.short_input_tokens, lengths.mixed_short_output_tokens, 81),
      stages.synthetic(lengths.long_input_tokens, lengths.long_output_tokens, 82), concurrency);
  const bench::RunResult run =
      stages.run("long among short", workload, concurrency, 2 * concurrency);
  evidence.mixed_short = stages.summarize(
      "mixed_short", concurrency, run, [&](const auto& r) { return !workload.is_long(r.index); });
  evidence.mixed_long = stages.summarize("mixed_long", concurrency, run,
                                         [&](const auto& r) { return workload.is_long(r.index); });
  const ProbePoint later = summarize_point("mixed_short", concurrency, run, [&](const auto& r) {
    return !workload.is_long(r.index) && r.index >= concurrency;
  });
  if (later.measured()) evidence.mixed_short_later_ttft_ms_p50 = later.ttft_ms.p50;
}

void attach_resources(const std::vector<TelemetryReading>& timeline, Evidence& evidence) {
  for (ProbePoint* point : {&evidence.cold, &evidence.short_baseline, &evidence.long_baseline,
                            &evidence.prefix, &evidence.mixed_short, &evidence.mixed_long}) {
    point->resources = resources_during(timeline, point->start_s, point->end_s);
  }
  for (ProbePoint& point : evidence.ramp) {
    point.resources = resources_during(timeline, point.start_s, point.end_s);
  }
}

}  // namespace

std::optional<ProbeOutcome> run_probe(const ProbeOptions& options, std::string& error) {
  // A reranker's probe is an embedding model's: a query and documents through the same batcher.
  if (bench::pooling_route(options.endpoint)) return run_embedding_probe(options, error);
  const bench::TokenCalibration calibration =
      bench::calibrate_tokens(options.target, options.model, std::chrono::seconds(10));
  TelemetryRecorder telemetry(options.target, options.server_pid, options.model);
  telemetry.start();
  Stages stages(options, calibration, telemetry.started_at());
  ProbeOutcome outcome;
  Evidence& evidence = outcome.evidence;
  evidence.budget_s = options.budget_s;
  evidence.workload = options.workload;
  const ProbeLengths& lengths = options.workload;

  const auto shorts = stages.synthetic(lengths.short_input_tokens, lengths.short_output_tokens, 1);
  const auto longs = stages.synthetic(lengths.long_input_tokens, lengths.long_output_tokens, 2);
  const auto cold_workload = stages.synthetic(lengths.short_input_tokens, 8, 3);

  const bench::RunResult cold = stages.run("cold request", *cold_workload, 1, 1);
  evidence.cold = stages.summarize("cold", 1, cold);
  if (!evidence.cold.measured()) {
    telemetry.stop();
    const bench::RequestRecord& record = cold.records.back();
    error = fmt::format("the first request to {} failed ({}: {})", options.target.url(),
                        bench::error_name(record.error), record.error_detail);
    return std::nullopt;
  }
  // A request alone costs about what the cold one did; the baselines take a third of the budget.
  const double cold_s = evidence.cold.e2e_ms.p50 / 1000;
  const bench::RunResult alone = stages.run("short prompts c=1", *shorts, 1,
                                            fit_requests(4, cold_s, stages.remaining_s() / 3, 2));
  evidence.short_baseline = stages.summarize("short", 1, alone);
  evidence.slo_missed = slo_misses(options.slo, alone);
  if (stages.remaining_s() > 0) {
    evidence.long_baseline =
        stages.summarize("long", 1, stages.run("long prompts c=1", *longs, 1, 2));
  } else {
    evidence.skipped.push_back("long prompts: the budget ran out");
  }
  const double long_request_s =
      evidence.long_baseline.measured() ? evidence.long_baseline.e2e_ms.p50 / 1000 : 0;
  run_ramp(options, stages, *shorts, kLongRequestsAfterRamp * long_request_s, evidence);
  if (shared_prefix_tokens(lengths) < 1) {
    evidence.skipped.push_back("repeated prefix: the workload's prompts share no prefix");
  } else if (evidence.long_baseline.measured() && stages.remaining_s() > 3 * long_request_s) {
    run_prefix_probe(options, stages, telemetry, evidence);
  } else {
    evidence.skipped.push_back("repeated prefix: the budget ran out");
  }
  if (evidence.long_baseline.measured() && stages.remaining_s() > 2 * long_request_s) {
    run_mixed_probe(options, stages, evidence);
  } else {
    evidence.skipped.push_back("long among short: the budget ran out");
  }
  telemetry.stop();
  evidence.elapsed_s = stages.elapsed_s();
  evidence.url = options.target.url();
  evidence.model = options.model;
  const auto prefix_queries = evidence.metrics.prefix_query_tokens;
  const auto prefix_hits = evidence.metrics.prefix_hit_tokens;
  evidence.metrics = telemetry.metrics_summary();
  evidence.metrics.prefix_query_tokens = prefix_queries;
  evidence.metrics.prefix_hit_tokens = prefix_hits;
  evidence.host = telemetry.host_summary();
  evidence.gpu = telemetry.gpu_summary();
  outcome.timeline = telemetry.readings();
  attach_resources(outcome.timeline, evidence);
  return outcome;
}

}  // namespace brisk::doctor
