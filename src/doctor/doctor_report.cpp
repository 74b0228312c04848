#include "doctor/doctor_report.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "doctor/attribution.h"
#include "doctor/rules.h"
#include "doctor/what_if.h"

namespace brisk::doctor {

using json = nlohmann::json;

namespace {

json latency_json(const bench::LatencySummary& summary) {
  return {{"count", summary.count}, {"mean", summary.mean}, {"p50", summary.p50},
          {"p90", summary.p90},     {"p95", summary.p95},   {"p99", summary.p99},
          {"max", summary.max}};
}

json nullable(double value) { return value < 0 ? json(nullptr) : json(value); }

json optional_json(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json predicted_effect_json(const Finding& finding) {
  if (!finding.predicted_effect) return nullptr;
  const PredictedEffect& effect = *finding.predicted_effect;
  return {{"metric", effect.metric},   {"unit", effect.unit},
          {"before", effect.before},   {"after", effect.after},
          {"change", effect.change()}, {"measured_before", nullable(effect.measured)},
          {"load", effect.load},       {"origin", effect.origin},
          {"text", describe_predicted_effect(effect)}};
}

json resources_json(const PointResources& resources) {
  return {{"readings", resources.readings},
          {"gpu_utilization_mean", optional_json(resources.gpu_utilization_mean)},
          {"gpu_memory_used_bytes_max", optional_json(resources.gpu_memory_used_bytes_max)},
          {"host_busy_cores_mean", optional_json(resources.host_busy_cores_mean)},
          {"server_cores_mean", optional_json(resources.server_cores_mean)}};
}

json point_json(const ProbePoint& point) {
  return {{"stage", point.stage},
          {"concurrency", point.concurrency},
          {"ok", point.ok},
          {"failed", point.failed},
          {"prompt_tokens_mean", point.prompt_tokens_mean},
          {"ttft_ms", latency_json(point.ttft_ms)},
          {"itl_ms", latency_json(point.itl_ms)},
          {"e2e_ms", latency_json(point.e2e_ms)},
          {"max_itl_ms", point.max_itl_ms},
          {"output_tokens_per_s", point.output_tokens_per_s},
          {"server_ttft_ms_p50", nullable(point.server_ttft_ms_p50)},
          {"server_queue_ms_p50", nullable(point.server_queue_ms_p50)},
          {"outside_server_ms_p50", nullable(point.outside_server_ms_p50)},
          {"cached_prompt_fraction", nullable(point.cached_prompt_fraction)},
          {"duration_s", point.duration_s},
          {"start_s", nullable(point.start_s)},
          {"end_s", nullable(point.end_s)},
          {"resources", resources_json(point.resources)}};
}

json batcher_json(const std::optional<EmbeddingBatcherDelta>& batcher) {
  if (!batcher) return nullptr;
  return {{"batches", batcher->batches},
          {"inputs_per_batch", batcher->inputs_per_batch()},
          {"window_wait_ms_mean", batcher->window_wait_ms_mean()},
          {"compute_ms_per_batch", batcher->compute_ms_per_batch()},
          {"tokenize_ms_per_request", batcher->tokenize_ms_per_request()},
          {"compute_ms", batcher->compute_ms},
          {"tokenize_ms", batcher->tokenize_ms}};
}

json embedding_point_json(const EmbeddingPoint& point) {
  return {{"stage", point.stage},
          {"concurrency", point.concurrency},
          {"ok", point.ok},
          {"failed", point.failed},
          {"latency_ms", latency_json(point.latency_ms)},
          {"inputs_per_s", point.inputs_per_s},
          {"duration_s", point.duration_s},
          {"start_s", nullable(point.start_s)},
          {"end_s", nullable(point.end_s)},
          {"batcher", batcher_json(point.batcher)},
          {"resources", resources_json(point.resources)}};
}

json embeddings_json(const EmbeddingEvidence& embeddings) {
  if (!embeddings.probed()) return nullptr;
  json ramp = json::array();
  for (const EmbeddingPoint& point : embeddings.ramp) ramp.push_back(embedding_point_json(point));
  return {{"input_tokens", embeddings.input_tokens},
          {"inputs_per_request", embeddings.inputs_per_request},
          {"cold", embedding_point_json(embeddings.cold)},
          {"ramp", ramp},
          {"ramp_stop_reason", embeddings.ramp_stop_reason}};
}

json workload_json(const ProbeLengths& workload) {
  return {{"source", workload.from_trace() ? "trace" : "synthetic"},
          {"trace", workload.from_trace() ? json(workload.trace_path) : json(nullptr)},
          {"trace_format", workload.from_trace() ? json(workload.trace_format) : json(nullptr)},
          {"trace_requests", workload.trace_requests},
          {"trace_prefix_sharing", optional_json(workload.trace_prefix_sharing)},
          {"flags_over_trace", workload.flags_over_trace},
          {"short_input_tokens", workload.short_input_tokens},
          {"short_output_tokens", workload.short_output_tokens},
          {"long_input_tokens", workload.long_input_tokens},
          {"long_output_tokens", workload.long_output_tokens},
          {"mixed_short_output_tokens", workload.mixed_short_output_tokens},
          {"shared_prefix_fraction", workload.shared_prefix_fraction}};
}

json per_core_json(const std::vector<telemetry::CoreShare>& cores) {
  json list = json::array();
  for (const telemetry::CoreShare& core : cores) {
    list.push_back({{"core", core.core},
                    {"user", core.share.user},
                    {"system", core.share.system},
                    {"iowait", core.share.iowait},
                    {"steal", core.share.steal},
                    {"busy", core.share.busy()}});
  }
  return list;
}

json machine_resources_json(const Evidence& evidence) {
  const HostSummary& host = evidence.host;
  json gpus = json::array();
  for (size_t i = 0; i < evidence.gpu.peak.size(); ++i) {
    const telemetry::GpuSample& gpu = evidence.gpu.peak[i];
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"utilization_mean", evidence.gpu.utilization_mean[i]},
                    {"utilization_peak", optional_json(gpu.utilization_fraction)},
                    {"memory_used_bytes_peak", optional_json(gpu.memory_used_bytes)},
                    {"memory_total_bytes", optional_json(gpu.memory_total_bytes)},
                    {"sm_clock_mhz_peak", optional_json(gpu.sm_clock_mhz)},
                    {"power_w_peak", optional_json(gpu.power_w)},
                    {"pcie_tx_bytes_per_s_peak", optional_json(gpu.pcie_tx_bytes_per_s)},
                    {"pcie_rx_bytes_per_s_peak", optional_json(gpu.pcie_rx_bytes_per_s)},
                    {"nvlinks_active", gpu.nvlinks_active},
                    {"nvlink_tx_bytes_per_s_peak", optional_json(gpu.nvlink_tx_bytes_per_s)},
                    {"nvlink_rx_bytes_per_s_peak", optional_json(gpu.nvlink_rx_bytes_per_s)}});
  }
  json links = json::array();
  for (const telemetry::GpuLink& link : evidence.gpu.links) {
    links.push_back({{"gpus", {link.first, link.second}}, {"kind", link.kind}});
  }
  const ServerMetricsSummary& metrics = evidence.metrics;
  return {{"host",
           {{"cores", host.cores},
            {"busy_cores_mean", host.busy_cores_mean},
            {"steal_fraction", host.steal_fraction},
            {"iowait_fraction", host.iowait_fraction},
            {"busiest_core_fraction", host.busiest_core_fraction},
            {"per_core", per_core_json(host.per_core)},
            {"doctor_cores_mean", host.doctor_cores_mean},
            {"server_pid", host.server_pid < 0 ? json(nullptr) : json(host.server_pid)},
            {"server_command", host.server_command},
            {"server_cores_mean", nullable(host.server_cores_mean)},
            {"server_threads", host.server_threads},
            {"other_cores_mean", host.other_cores_mean},
            {"top_other_process", host.top_other_process},
            {"top_other_cores", host.top_other_cores},
            {"memory_used_fraction_max", host.memory_used_fraction_max},
            {"memory_total_bytes", host.memory_total_bytes}}},
          {"gpu",
           {{"present", evidence.gpu.present()},
            {"absent_reason", evidence.gpu.absent_reason},
            {"gpus", gpus},
            {"links", links}}},
          {"server_metrics",
           {{"dialect", metrics.dialect.empty() ? json(nullptr) : json(metrics.dialect)},
            {"absent_reason", metrics.absent_reason},
            {"waiting_max", optional_json(metrics.waiting_max)},
            {"running_max", optional_json(metrics.running_max)},
            {"kv_usage_max", optional_json(metrics.kv_usage_max)},
            {"preemptions", optional_json(metrics.preemptions)},
            {"kv_full_blocks", optional_json(metrics.kv_full_blocks)},
            {"prefix_query_tokens", optional_json(metrics.prefix_query_tokens)},
            {"prefix_hit_tokens", optional_json(metrics.prefix_hit_tokens)},
            {"prefix_hit_rate", optional_json(metrics.prefix_hit_rate)},
            {"others_busy_share", optional_json(metrics.others_busy_share)},
            {"busiest_other_model", metrics.busiest_other_model.empty()
                                        ? json(nullptr)
                                        : json(metrics.busiest_other_model)},
            {"own_busy_share", optional_json(metrics.own_busy_share)},
            {"arbiter_wait_share", optional_json(metrics.arbiter_wait_share)},
            {"arbiter_wait_ms_mean", optional_json(metrics.arbiter_wait_ms_mean)},
            {"model_loads", optional_json(metrics.model_loads)},
            {"most_loaded_model", metrics.most_loaded_model.empty()
                                      ? json(nullptr)
                                      : json(metrics.most_loaded_model)},
            {"model_unloads_by_reason", metrics.model_unloads_by_reason},
            {"model_load_seconds", optional_json(metrics.model_load_seconds)}}}};
}

json attribution_json(const PhaseAttribution& phases) {
  return {{"stage", phases.stage},
          {"concurrency", phases.concurrency},
          {"outside_server_ms", optional_json(phases.outside_server_ms)},
          {"server_ttft_ms", optional_json(phases.server_ttft_ms)},
          {"queue_ms", optional_json(phases.queue_ms)},
          {"prefill_ms", optional_json(phases.prefill_ms)},
          {"decode_ms_per_token", optional_json(phases.decode_ms_per_token)},
          {"floor_ms_per_token", optional_json(phases.floor_ms_per_token)},
          {"decode_over_floor", optional_json(phases.decode_over_floor)}};
}

// The concurrency-1 baseline and the top of the ramp: where the time goes alone and under the
// most load the probe offered.
std::vector<PhaseAttribution> attributed_points(const Evidence& evidence) {
  std::vector<PhaseAttribution> points;
  if (evidence.short_baseline.measured()) {
    points.push_back(attribute_phases(evidence.short_baseline, evidence.floor));
  }
  if (const ProbePoint* top = ramp_top(evidence)) {
    points.push_back(attribute_phases(*top, evidence.floor));
  }
  return points;
}

json attributions_json(const Evidence& evidence) {
  const ProbePoint* top = ramp_top(evidence);
  return {
      {"baseline", evidence.short_baseline.measured()
                       ? attribution_json(attribute_phases(evidence.short_baseline, evidence.floor))
                       : json(nullptr)},
      {"ramp_top", top ? attribution_json(attribute_phases(*top, evidence.floor)) : json(nullptr)}};
}

std::string fixed(double value, const char* unit = "") {
  return value < 0 ? "n/a" : fmt::format("{:.1f}{}", value, unit);
}

// "cpu0 95% (90/5/0/0)": busy, then user/system/iowait/steal in percent. A machine with many
// cores lists its busiest ones: the table row has to stay readable.
std::string per_core_cell(std::vector<telemetry::CoreShare> cores) {
  constexpr size_t kCoresListedMax = 16;
  const size_t total = cores.size();
  if (total > kCoresListedMax) {
    std::stable_sort(cores.begin(), cores.end(),
                     [](const auto& a, const auto& b) { return a.share.busy() > b.share.busy(); });
  }
  std::string cell;
  double rest_busy = 0;
  for (size_t i = 0; i < total; ++i) {
    const telemetry::CpuShare& share = cores[i].share;
    if (i >= kCoresListedMax) {
      rest_busy += share.busy();
      continue;
    }
    cell += fmt::format("{}cpu{} {:.0f}% ({:.0f}/{:.0f}/{:.0f}/{:.0f})", cell.empty() ? "" : " · ",
                        cores[i].core, share.busy() * 100, share.user * 100, share.system * 100,
                        share.iowait * 100, share.steal * 100);
  }
  if (total > kCoresListedMax) {
    cell += fmt::format(" · {} more, {:.0f}% busy on average", total - kCoresListedMax,
                        rest_busy / (total - kCoresListedMax) * 100);
  }
  return cell;
}

std::string optional_cell(const std::optional<double>& value, const char* format) {
  return value ? fmt::format(fmt::runtime(format), *value) : "n/a";
}

std::string where_the_time_went(const Evidence& evidence) {
  const std::vector<PhaseAttribution> points = attributed_points(evidence);
  if (points.empty()) return "";
  std::string out = "## Where the time went\n\n| phase (p50) |";
  for (const PhaseAttribution& point : points) {
    out += fmt::format(" {} at {} concurrent |", point.stage, point.concurrency);
  }
  out += "\n|---|";
  for (size_t i = 0; i < points.size(); ++i) out += "---|";
  out += "\n";
  using Field = std::optional<double> PhaseAttribution::*;
  const std::vector<std::tuple<const char*, Field, const char*>> rows = {
      {"outside the server (network + frontend)", &PhaseAttribution::outside_server_ms,
       "{:.1f} ms"},
      {"server TTFT", &PhaseAttribution::server_ttft_ms, "{:.1f} ms"},
      {"= queue", &PhaseAttribution::queue_ms, "{:.1f} ms"},
      {"+ prefill", &PhaseAttribution::prefill_ms, "{:.1f} ms"},
      {"decode per token (ITL)", &PhaseAttribution::decode_ms_per_token, "{:.1f} ms"},
      {"hardware floor per token", &PhaseAttribution::floor_ms_per_token, "{:.1f} ms"},
      {"decode / floor", &PhaseAttribution::decode_over_floor, "{:.1f}x"}};
  for (const auto& [name, field, format] : rows) {
    out += fmt::format("| {} |", name);
    for (const PhaseAttribution& point : points) {
      out += fmt::format(" {} |", optional_cell(point.*field, format));
    }
    out += "\n";
  }
  return out + "\nn/a: the server (or brisk plan, for the floor) did not report it.\n\n";
}

std::string embeddings_table(const EmbeddingEvidence& embeddings) {
  std::string out = fmt::format(
      "## Embeddings\n\n{} input{} of {} tokens a request. Batcher columns: what brisk serve's "
      "/metrics counted during each point (n/a: the server does not say).\n\n| probe | "
      "concurrency | requests | inputs/s | latency p50 | p95 | p99 | inputs a batch | wait for "
      "a batch | model time a batch | tokenize a request |\n|---|---|---|---|---|---|---|---|---"
      "|---|---|\n",
      embeddings.inputs_per_request, embeddings.inputs_per_request == 1 ? "" : "s",
      embeddings.input_tokens);
  std::vector<const EmbeddingPoint*> points = {&embeddings.cold};
  for (const EmbeddingPoint& point : embeddings.ramp) points.push_back(&point);
  for (const EmbeddingPoint* point : points) {
    if (!point->measured()) continue;
    const auto& batcher = point->batcher;
    const auto cell = [&](double value, const char* format) {
      return batcher ? fmt::format(fmt::runtime(format), value) : std::string("n/a");
    };
    out += fmt::format(
        "| {} | {} | {} | {:.1f} | {} ms | {} ms | {} ms | {} | {} | {} | {} |\n", point->stage,
        point->concurrency, point->ok, point->inputs_per_s, fixed(point->latency_ms.p50),
        fixed(point->latency_ms.p95), fixed(point->latency_ms.p99),
        cell(batcher ? batcher->inputs_per_batch() : 0, "{:.2f}"),
        cell(batcher ? batcher->window_wait_ms_mean() : 0, "{:.1f} ms"),
        cell(batcher ? batcher->compute_ms_per_batch() : 0, "{:.1f} ms"),
        cell(batcher ? batcher->tokenize_ms_per_request() : 0, "{:.2f} ms"));
  }
  out += fmt::format("\nRamp stopped: {}.\n\n", embeddings.ramp_stop_reason.empty()
                                                      ? "did not run"
                                                      : embeddings.ramp_stop_reason);
  return out;
}

// "$X/h at the best measured N <unit>/s: $Y per 1M <unit>." (or how to get it).
std::string cost_line(const std::optional<double>& usd_per_hour, double best, const char* unit) {
  if (usd_per_hour && best > 0) {
    return fmt::format("${:.4g}/h at the best measured {:.1f} {}/s: ${:.2f} per 1M {}.\n",
                       *usd_per_hour, best, unit, *usd_per_hour / (best * 3600) * 1e6, unit);
  }
  return fmt::format("Best measured {:.1f} {}/s; pass --usd-per-hour for $/1M {}.\n", best, unit,
                     unit);
}

std::string cost_section(const Evidence& evidence) {
  return "\n## Cost\n\n" +
         (evidence.embeddings.probed()
              ? cost_line(evidence.usd_per_hour, best_inputs_per_s(evidence), "inputs")
              : cost_line(evidence.usd_per_hour, best_output_tokens_per_s(evidence),
                          "output tokens"));
}

std::string latency_table(const Evidence& evidence) {
  std::string out =
      "## Latency\n\n| probe | concurrency | requests | TTFT mean | TTFT p95 | TTFT p99 | ITL p50 "
      "| E2E mean | E2E p50 | E2E p95 | E2E p99 | output tokens/s | server TTFT p50 "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ProbePoint* point : reported_points(evidence)) {
    out += fmt::format(
        "| {} | {} | {} | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {} | {} "
        "|\n",
        point->stage, point->concurrency, point->ok, fixed(point->ttft_ms.mean),
        fixed(point->ttft_ms.p95), fixed(point->ttft_ms.p99), fixed(point->itl_ms.p50),
        fixed(point->e2e_ms.mean), fixed(point->e2e_ms.p50), fixed(point->e2e_ms.p95),
        fixed(point->e2e_ms.p99), fixed(point->output_tokens_per_s),
        fixed(point->server_ttft_ms_p50, " ms"));
  }
  out += fmt::format("\nRamp stopped: {}.",
                     evidence.ramp_stop_reason.empty() ? "did not run" : evidence.ramp_stop_reason);
  for (const std::string& skipped : evidence.skipped) out += " Skipped: " + skipped + ".";
  return out + "\n\n";
}

std::string evidence_value(const EvidenceItem& item) {
  if (item.unit == "fraction") return fmt::format("{:.1f}%", item.value * 100);
  return fmt::format("{:.4g}{}{}", item.value, item.unit.empty() ? "" : " ", item.unit);
}

}  // namespace

std::vector<const ProbePoint*> reported_points(const Evidence& evidence) {
  std::vector<const ProbePoint*> points = {&evidence.cold, &evidence.short_baseline,
                                           &evidence.long_baseline};
  // The ramp's first point is the short baseline again.
  for (size_t i = 1; i < evidence.ramp.size(); ++i) points.push_back(&evidence.ramp[i]);
  points.insert(points.end(), {&evidence.prefix, &evidence.mixed_short, &evidence.mixed_long});
  std::erase_if(points, [](const ProbePoint* point) { return !point->measured(); });
  return points;
}

double best_output_tokens_per_s(const Evidence& evidence) {
  double best = 0;
  for (const ProbePoint& point : evidence.ramp) best = std::max(best, point.output_tokens_per_s);
  return best;
}

double best_inputs_per_s(const Evidence& evidence) {
  double best = 0;
  for (const EmbeddingPoint& point : evidence.embeddings.ramp) {
    best = std::max(best, point.inputs_per_s);
  }
  return best;
}

json report_json(const Evidence& evidence, const Diagnosis& diagnosis) {
  json findings = json::array();
  for (const Finding& finding : diagnosis.findings) {
    json items = json::array();
    for (const EvidenceItem& item : finding.evidence) {
      items.push_back({{"name", item.name},
                       {"value", item.value},
                       {"unit", item.unit},
                       {"source", item.source}});
    }
    findings.push_back({{"id", finding.id},
                        {"severity", severity_name(finding.severity)},
                        {"summary", finding.summary},
                        {"evidence", items},
                        {"prescription", finding.prescription},
                        {"serve_flags", finding.serve_flags},
                        {"predicted_effect", predicted_effect_json(finding)},
                        {"impact", finding.impact}});
    if (!finding.predicted_effect_unavailable.empty()) {
      findings.back()["predicted_effect_unavailable"] = finding.predicted_effect_unavailable;
    }
  }
  json ramp = json::array();
  for (const ProbePoint& point : evidence.ramp) ramp.push_back(point_json(point));
  const double best = best_output_tokens_per_s(evidence);
  json cost = {
      {"usd_per_hour", optional_json(evidence.usd_per_hour)},
      {"best_output_tokens_per_s", best},
      {"usd_per_million_output_tokens", evidence.usd_per_hour && best > 0
                                            ? json(*evidence.usd_per_hour / (best * 3600) * 1e6)
                                            : json(nullptr)}};
  if (evidence.embeddings.probed()) {
    const double inputs = best_inputs_per_s(evidence);
    cost["best_inputs_per_s"] = inputs;
    cost["usd_per_million_inputs"] = evidence.usd_per_hour && inputs > 0
                                         ? json(*evidence.usd_per_hour / (inputs * 3600) * 1e6)
                                         : json(nullptr);
  }
  return {{"verdict",
           {{"accelerator_bound", diagnosis.verdict.accelerator_bound},
            {"primary_cause", diagnosis.verdict.primary_cause},
            {"summary", diagnosis.verdict.summary}}},
          {"findings", findings},
          {"measurements",
           {{"url", evidence.url},
            {"model", evidence.model},
            {"budget_s", evidence.budget_s},
            {"elapsed_s", evidence.elapsed_s},
            {"workload", workload_json(evidence.workload)},
            {"endpoint",
             evidence.embeddings.probed() ? evidence.embeddings.endpoint : "completions"},
            {"skipped", evidence.skipped},
            {"slo_missed_at_concurrency_1", evidence.slo_missed},
            {"probe",
             {{"cold", point_json(evidence.cold)},
              {"short", point_json(evidence.short_baseline)},
              {"long", point_json(evidence.long_baseline)},
              {"ramp", ramp},
              {"ramp_stop_reason", evidence.ramp_stop_reason},
              {"prefix", point_json(evidence.prefix)},
              {"prefix_shared_fraction", evidence.prefix_shared_fraction},
              {"mixed_short", point_json(evidence.mixed_short)},
              {"mixed_long", point_json(evidence.mixed_long)},
              {"mixed_short_later_ttft_ms_p50", nullable(evidence.mixed_short_later_ttft_ms_p50)},
              {"embeddings", embeddings_json(evidence.embeddings)}}},
            {"attribution", attributions_json(evidence)},
            {"resources", machine_resources_json(evidence)},
            {"hardware_floor",
             {{"decode_ms_per_token", nullable(evidence.floor.decode_ms_per_token)},
              {"device", evidence.floor.device},
              {"source", evidence.floor.source}}},
            {"cost", cost}}}};
}

std::string markdown_report(const Evidence& evidence, const Diagnosis& diagnosis) {
  std::string out;
  const Verdict& verdict = diagnosis.verdict;
  out += fmt::format("# brisk doctor: {}\n\n", verdict.primary_cause);
  out += fmt::format("**Is the accelerator the bottleneck? {}.** {}\n\n",
                     verdict.accelerator_bound ? "Yes" : "No", verdict.summary);
  out += fmt::format("Target {} (model {}), probed for {:.0f} s of a {:.0f} s budget.\n\n",
                     evidence.url, evidence.model, evidence.elapsed_s, evidence.budget_s);
  if (evidence.embeddings.probed()) {
    out += embeddings_table(evidence.embeddings);
  } else {
    out += fmt::format("Workload: {}.\n\n", describe_probe_lengths(evidence.workload));
    out += latency_table(evidence);
  }
  out += where_the_time_went(evidence);
  out += "## Resources\n\n| resource | value | source |\n|---|---|---|\n";
  const HostSummary& host = evidence.host;
  if (evidence.gpu.present()) {
    for (size_t i = 0; i < evidence.gpu.peak.size(); ++i) {
      const auto& gpu = evidence.gpu.peak[i];
      out += fmt::format("| GPU {} {} utilization (mean) | {:.0f}% | NVML |\n", i, gpu.name,
                         evidence.gpu.utilization_mean[i] * 100);
      if (gpu.memory_used_bytes && gpu.memory_total_bytes) {
        out += fmt::format("| GPU {} memory (peak) | {:.1f} / {:.1f} GiB | NVML |\n", i,
                           *gpu.memory_used_bytes / (1 << 30), *gpu.memory_total_bytes / (1 << 30));
      }
      if (gpu.nvlink_tx_bytes_per_s && gpu.nvlink_rx_bytes_per_s) {
        out += fmt::format("| GPU {} NVLink TX / RX (peak) | {:.2f} / {:.2f} GB/s | NVML |\n", i,
                           *gpu.nvlink_tx_bytes_per_s / 1e9, *gpu.nvlink_rx_bytes_per_s / 1e9);
      }
    }
    for (const auto& link : evidence.gpu.links) {
      out += fmt::format("| GPU {} <-> GPU {} | {} | NVML topology |\n", link.first, link.second,
                         link.kind);
    }
  } else {
    out += fmt::format("| accelerator | none seen: {} | NVML |\n", evidence.gpu.absent_reason);
  }
  out += fmt::format("| host CPU busy (mean) | {:.2f} of {} cores | /proc/stat |\n",
                     host.busy_cores_mean, host.cores);
  out +=
      host.server_pid >= 0
          ? fmt::format(
                "| server process {} (pid {}) | {:.2f} cores, {} threads | /proc/PID/stat |\n",
                host.server_command, host.server_pid, host.server_cores_mean, host.server_threads)
          : "| server process | not on this machine (or not visible) | /proc/net/tcp |\n";
  out += fmt::format(
      "| other processes | {:.2f} cores{} | /proc/*/stat |\n", host.other_cores_mean,
      host.top_other_process.empty()
          ? ""
          : fmt::format(" (most: {} {:.2f})", host.top_other_process, host.top_other_cores));
  if (!host.per_core.empty()) {
    out += fmt::format("| per core busy (user/system/iowait/steal %) | {} | /proc/stat |\n",
                       per_core_cell(host.per_core));
  }
  out += fmt::format("| brisk doctor itself | {:.2f} cores | /proc/self/stat |\n",
                     host.doctor_cores_mean);
  out += fmt::format("| steal / iowait | {:.1f}% / {:.1f}% | /proc/stat |\n",
                     host.steal_fraction * 100, host.iowait_fraction * 100);
  out += fmt::format("| host memory used (peak) | {:.0f}% of {:.1f} GiB | /proc/meminfo |\n",
                     host.memory_used_fraction_max * 100, host.memory_total_bytes / (1 << 30));
  const ServerMetricsSummary& metrics = evidence.metrics;
  if (!metrics.dialect.empty() && evidence.embeddings.probed()) {
    out += fmt::format("| requests queued (max) | {} | /metrics ({}) |\n",
                       metrics.waiting_max ? fmt::format("{:.0f}", *metrics.waiting_max) : "n/a",
                       metrics.dialect);
  } else if (!metrics.dialect.empty()) {
    out += fmt::format(
        "| server queue / running (max) | {} / {} | /metrics ({}) |\n| KV cache usage (max) | {} | "
        "/metrics |\n| preemptions | {} | /metrics |\n| steps waiting for KV room | {} | "
        "/metrics |\n",
        metrics.waiting_max ? fmt::format("{:.0f}", *metrics.waiting_max) : "n/a",
        metrics.running_max ? fmt::format("{:.0f}", *metrics.running_max) : "n/a", metrics.dialect,
        metrics.kv_usage_max ? fmt::format("{:.0f}%", *metrics.kv_usage_max * 100) : "n/a",
        metrics.preemptions ? fmt::format("{:.0f}", *metrics.preemptions) : "n/a",
        metrics.kv_full_blocks ? fmt::format("{:.0f}", *metrics.kv_full_blocks) : "n/a");
  } else {
    out += fmt::format("| server metrics | absent: {} | /metrics |\n", metrics.absent_reason);
  }
  if (!evidence.embeddings.probed()) {
    out += fmt::format("| decode floor | {} | {} |\n",
                       fixed(evidence.floor.decode_ms_per_token, " ms/token"),
                       evidence.floor.source);
  }
  out += cost_section(evidence);
  out += "\n## Findings\n\n";
  if (diagnosis.findings.empty()) out += "None: every rule's threshold held.\n";
  int rank = 1;
  for (const Finding& finding : diagnosis.findings) {
    out += fmt::format("{}. **{}** ({}): {}.\n", rank++, finding.id,
                       severity_name(finding.severity), finding.summary);
    for (const EvidenceItem& item : finding.evidence) {
      out += fmt::format("   - {}: {} — {}\n", item.name, evidence_value(item), item.source);
    }
    out += fmt::format("   - Fix: {}.\n", finding.prescription);
    if (finding.predicted_effect) {
      out += fmt::format("   - Predicted: {}.\n", describe_predicted_effect(*finding.predicted_effect));
    } else if (!finding.predicted_effect_unavailable.empty()) {
      out += fmt::format("   - Predicted: not available ({}).\n",
                         finding.predicted_effect_unavailable);
    }
    if (!finding.serve_flags.empty()) {
      out += fmt::format("   - Measure it: brisk tune --verify report.json (brisk serve {}).\n",
                         fmt::join(finding.serve_flags, " "));
    }
  }
  return out;
}

}  // namespace brisk::doctor
