#include "plan/plan_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

namespace brisk::plan {
namespace {

// The statistic the table shows: the SLO's first percentile, else p95.
std::string shown_stat(const PlanRequest& request) {
  for (const SloLimit& limit : request.slo) {
    if (limit.metric != "e2e") return limit.stat;
  }
  return "p95";
}

nlohmann::json spread_json(const std::optional<PredictionSpread>& spread) {
  if (!spread) return nullptr;
  auto of = [](const PredictionSpread::Of& figure) {
    return nlohmann::json{{"p50", {figure.p50.low, figure.p50.high}},
                          {"p95", {figure.p95.low, figure.p95.high}},
                          {"p99", {figure.p99.low, figure.p99.high}}};
  };
  return {{"runs", spread->runs},
          {"requests", spread->requests},
          {"saturated_runs", spread->saturated_runs},
          {"ttft_ms", of(spread->ttft_ms)},
          {"tpot_ms", of(spread->tpot_ms)}};
}

nlohmann::json percentiles_json(const Percentiles& values) {
  return {{"mean", values.mean}, {"p50", values.p50}, {"p95", values.p95}, {"p99", values.p99}};
}

nlohmann::json length_json(const LengthStats& stats) {
  return {{"mean", stats.mean},
          {"p50", stats.p50},
          {"p90", stats.p90},
          {"p99", stats.p99},
          {"max", stats.max}};
}

std::string length_text(const LengthStats& stats) {
  return fmt::format("mean {:.0f}, p50 {:.0f}, p90 {:.0f}, p99 {:.0f}, max {:.0f}", stats.mean,
                     stats.p50, stats.p90, stats.p99, stats.max);
}

bool used(const TraceSummary& trace, const std::string& input) {
  return std::find(trace.used_for.begin(), trace.used_for.end(), input) != trace.used_for.end();
}

// What the trace holds and which of the plan's inputs came from it.
void print_trace(std::ostream& out, const TraceSummary& trace, const Workload& workload) {
  fmt::print(
      out, "trace     {} ({}): {} requests over {:.2f} s{}\n", trace.file,
      trace_format_name(trace.format), trace.requests, trace.span_s,
      trace.rate_per_s ? fmt::format(", {:.3g} requests/s", *trace.rate_per_s) : ", all at once");
  fmt::print(out, "          prompt tokens {}; output tokens {}\n", length_text(trace.input_tokens),
             length_text(trace.output_tokens));
  fmt::print(out, "          prefix sharing: {}\n",
             trace.prefix_shared_fraction
                 ? fmt::format("{:.0f}% of prompt tokens are in blocks an earlier request had",
                               *trace.prefix_shared_fraction * 100)
                 : std::string("unknown (the trace has no block hashes)"));
  std::vector<std::string> uses;
  if (used(trace, "input_tokens") || used(trace, "output_tokens")) {
    uses.push_back(fmt::format("{} (the plan simulates one length per request)",
                               used(trace, "input_tokens") && used(trace, "output_tokens")
                                   ? "the mean lengths"
                               : used(trace, "input_tokens") ? "the mean prompt length"
                                                             : "the mean output length"));
  }
  if (used(trace, "rate")) uses.push_back("its rate as Poisson arrivals");
  if (used(trace, "burst")) uses.push_back("its requests as one burst (they arrive at once)");
  if (used(trace, "cached_prompt_tokens")) {
    uses.push_back(fmt::format(
        "a prefix cache serving {} of each prompt's {} tokens (a cache that keeps every shared "
        "block, on every replica)",
        workload.cached_prompt_tokens, workload.input_tokens));
  }
  fmt::print(out, "          used for: {}\n",
             uses.empty() ? std::string("nothing (the flags gave lengths and load)")
                          : fmt::format("{}", fmt::join(uses, "; ")));
}

nlohmann::json trace_json(const TraceSummary& trace) {
  return {{"file", trace.file},
          {"format", trace_format_name(trace.format)},
          {"requests", trace.requests},
          {"span_s", trace.span_s},
          {"rate_per_s", trace.rate_per_s ? nlohmann::json(*trace.rate_per_s) : nlohmann::json()},
          {"input_tokens", length_json(trace.input_tokens)},
          {"output_tokens", length_json(trace.output_tokens)},
          {"prefix_shared_fraction", trace.prefix_shared_fraction
                                         ? nlohmann::json(*trace.prefix_shared_fraction)
                                         : nlohmann::json()},
          {"used_for", trace.used_for}};
}

}  // namespace

std::string load_text(const Workload& workload) {
  if (workload.rate_per_s > 0) return fmt::format("{:g} requests/s (Poisson)", workload.rate_per_s);
  if (workload.burst)
    return fmt::format("a burst of {} requests", std::max(1, workload.concurrency));
  return fmt::format("{} concurrent users", std::max(1, workload.concurrency));
}

std::string slo_text(const std::vector<SloLimit>& slo) {
  if (slo.empty()) return "none";
  std::string text;
  for (const SloLimit& limit : slo) {
    text += fmt::format("{}{}_{} <= {:g} ms", text.empty() ? "" : ", ", limit.metric, limit.stat,
                        limit.limit_ms);
  }
  return text;
}

void print_plan(std::ostream& out, const PlanRequest& request, const Plan& plan) {
  const ModelProfile& model = request.model;
  fmt::print(out, "model     {} ({:.2f}B parameters, {} layers, {} KV heads x {}), {} weights\n",
             model.name, model.parameters / 1e9, model.layers, model.kv_heads, model.head_dim,
             request.precision.name);
  const Workload& workload = request.workload;
  fmt::print(out, "workload  {} input{} + {} output tokens, {}; SLO: {}; headroom {:.0f}%\n",
             workload.input_tokens,
             workload.cached_prompt_tokens > 0
                 ? fmt::format(" ({} from the prefix cache)", workload.cached_prompt_tokens)
                 : "",
             workload.output_tokens, load_text(workload), slo_text(request.slo),
             request.headroom * 100);
  if (request.trace) print_trace(out, *request.trace, workload);
  fmt::print(out, "\n");
  const std::string stat = shown_stat(request);
  fmt::print(out, "{:<14} {:>5} {:>5} {:>20} {:>10} {:>10} {:>8} {:>9} {:>9}  {}\n", "device",
             "count", "fits", "memory GB/device", "TTFT " + stat, "TPOT " + stat, "max conc",
             "$/hour", "$/1M out", "note");
  for (const Candidate& candidate : plan.candidates) {
    const MemoryBreakdown& memory = candidate.memory;
    const std::string memory_text = fmt::format("{:.1f}/{:.1f}", memory.total_gb, memory.usable_gb);
    const bool predicted =
        candidate.fits && candidate.replicas > 0 && candidate.max_concurrency > 0;
    const std::string ttft =
        predicted ? fmt::format("{:.0f} ms", candidate.at_target.ttft_ms.at(stat)) : "-";
    const std::string tpot =
        predicted ? fmt::format("{:.1f} ms", candidate.at_target.tpot_ms.at(stat)) : "-";
    const std::string cost = candidate.usd_per_million_output_tokens
                                 ? fmt::format("{:.2f}", *candidate.usd_per_million_output_tokens)
                                 : "-";
    const std::string count =
        candidate.replicas > 1
            ? fmt::format("{}x{}", candidate.replicas, candidate.deployment.devices)
            : fmt::format("{}", candidate.deployment.devices);
    fmt::print(out, "{:<14} {:>5} {:>5} {:>20} {:>10} {:>10} {:>8} {:>9.2f} {:>9}  {}\n",
               candidate.deployment.device->id, count, candidate.fits ? "yes" : "no", memory_text,
               ttft, tpot, candidate.max_concurrency, candidate.usd_per_hour, cost,
               candidate.meets_slo ? "" : candidate.problem);
  }
  fmt::print(out,
             "\ncount: devices per replica, or REPLICASxDEVICES; memory: planned use / usable; "
             "max conc: users one replica serves within the SLO; $/1M out: with replicas busy "
             "at max conc.\n");
  if (!plan.recommended) {
    fmt::print(out,
               "\nNo candidate serves this load within the SLO. Loosen the SLO, allow more "
               "devices (--max-devices), or pick a smaller precision (--precision).\n");
    return;
  }
  const Candidate& chosen = plan.candidates[*plan.recommended];
  fmt::print(out, "\nRecommendation: {} x {} ({}).\n", chosen.device_count(),
             chosen.deployment.device->name, chosen.deployment.device->id);
  for (const std::string& reason : plan.reasons) fmt::print(out, "  - {}\n", reason);
  if (const auto& spread = chosen.at_target.spread) {
    const PredictionSpread::Of& ttft = spread->ttft_ms;
    const PredictionSpread::Of& tpot = spread->tpot_ms;
    fmt::print(out,
               "\nSpread: one run of {} requests at this rate measures, per replica, TTFT p50 "
               "{:.0f}-{:.0f} ms, p99 {:.0f}-{:.0f} ms; TPOT p50 {:.1f}-{:.1f} ms, p99 "
               "{:.1f}-{:.1f} ms (10th-90th percentile of {} seeded runs{}).\n",
               spread->requests, ttft.p50.low, ttft.p50.high, ttft.p99.low, ttft.p99.high,
               tpot.p50.low, tpot.p50.high, tpot.p99.low, tpot.p99.high, spread->runs,
               spread->saturated_runs > 0
                   ? fmt::format("; {} more saturated", spread->saturated_runs)
                   : std::string());
  }
}

nlohmann::json plan_json(const PlanRequest& request, const Plan& plan) {
  const ModelProfile& model = request.model;
  nlohmann::json root;
  root["model"] = {{"id", model.id},
                   {"name", model.name},
                   {"origin", model.origin},
                   {"parameters", model.parameters},
                   {"layers", model.layers},
                   {"hidden_size", model.hidden_size},
                   {"kv_heads", model.kv_heads},
                   {"head_dim", model.head_dim},
                   {"precision", request.precision.name},
                   {"weight_gb", model.weight_bytes(request.precision) / 1e9},
                   {"kv_bytes_per_token", model.kv_bytes(1, request.kv_bytes_per_element)}};
  nlohmann::json slo = nlohmann::json::object();
  for (const SloLimit& limit : request.slo) slo[limit.metric + "_" + limit.stat] = limit.limit_ms;
  root["workload"] = {
      {"input_tokens", request.workload.input_tokens},
      {"cached_prompt_tokens", request.workload.cached_prompt_tokens},
      {"output_tokens", request.workload.output_tokens},
      {"concurrency", request.workload.rate_per_s > 0
                          ? nlohmann::json(nullptr)
                          : nlohmann::json(std::max(1, request.workload.concurrency))},
      {"rate", request.workload.rate_per_s > 0 ? nlohmann::json(request.workload.rate_per_s)
                                               : nlohmann::json(nullptr)},
      {"burst", request.workload.burst},
      {"slo_ms", slo},
      {"headroom", request.headroom},
      {"trace", request.trace ? trace_json(*request.trace) : nlohmann::json()}};
  nlohmann::json candidates = nlohmann::json::array();
  for (const Candidate& candidate : plan.candidates) {
    const MemoryBreakdown& memory = candidate.memory;
    const bool predicted =
        candidate.fits && candidate.replicas > 0 && candidate.max_concurrency > 0;
    nlohmann::json entry = {
        {"device", candidate.deployment.device->id},
        {"count", candidate.device_count()},
        {"devices_per_replica", candidate.deployment.devices},
        {"replicas", candidate.replicas},
        {"fits", candidate.fits},
        {"meets_slo", candidate.meets_slo},
        {"problem", candidate.problem},
        {"memory_gb",
         {{"weights", memory.weights_gb},
          {"kv_cache", memory.kv_cache_gb},
          {"activations", memory.activations_gb},
          {"runtime", memory.runtime_gb},
          {"total", memory.total_gb},
          {"usable", memory.usable_gb},
          {"capacity", memory.capacity_gb}}},
        {"ttft_ms", predicted ? percentiles_json(candidate.at_target.ttft_ms) : nullptr},
        {"tpot_ms", predicted ? percentiles_json(candidate.at_target.tpot_ms) : nullptr},
        {"spread", predicted ? spread_json(candidate.at_target.spread) : nullptr},
        {"max_concurrency", candidate.max_concurrency},
        {"max_rate_per_replica", candidate.max_rate_per_s},
        {"output_token_throughput", candidate.at_target.output_token_throughput},
        {"usd_per_hour", candidate.usd_per_hour},
        {"usd_per_million_output_tokens",
         candidate.usd_per_million_output_tokens
             ? nlohmann::json(*candidate.usd_per_million_output_tokens)
             : nlohmann::json(nullptr)},
        {"efficiency",
         {{"bandwidth", candidate.deployment.efficiency.bandwidth},
          {"compute", candidate.deployment.efficiency.compute},
          {"prefill_compute", candidate.deployment.efficiency.prefill_compute},
          {"step_overhead_ms", candidate.deployment.efficiency.step_overhead_ms},
          {"sample_ns_per_vocab_entry", candidate.deployment.efficiency.sample_ns_per_vocab_entry},
          {"origin", candidate.deployment.efficiency.origin}}}};
    candidates.push_back(entry);
  }
  root["candidates"] = candidates;
  if (plan.recommended) {
    const Candidate& chosen = plan.candidates[*plan.recommended];
    root["recommendation"] = {{"device", chosen.deployment.device->id},
                              {"count", chosen.device_count()},
                              {"reasons", plan.reasons}};
  } else {
    root["recommendation"] = nullptr;
  }
  return root;
}

void print_explanation(std::ostream& out, const PlanRequest& request, const Candidate& candidate) {
  const Deployment& deployment = candidate.deployment;
  const ModelProfile& model = deployment.model;
  const DeviceSpec& device = *deployment.device;
  const Workload& workload = request.workload;
  fmt::print(out, "\nHow {} x {} was predicted\n", deployment.devices, device.id);
  fmt::print(out, "device      {}: {:g} GB at {:g} GB/s, {:g} dense TFLOP/s for {} ({})\n",
             device.name, device.memory_gb, device.memory_bandwidth_gb_s,
             deployment.precision.dense_tflops(device), deployment.precision.compute_rate,
             device.spec_source);
  fmt::print(out,
             "efficiency  bandwidth x{:.2f}, compute x{:.2f} (decode) and x{:.2f} (prompts), "
             "{:.2f} ms per step + {:.1f} ns per vocabulary entry sampled: {}\n",
             deployment.efficiency.bandwidth, deployment.efficiency.compute,
             deployment.efficiency.prefill_compute, deployment.efficiency.step_overhead_ms,
             deployment.efficiency.sample_ns_per_vocab_entry, deployment.efficiency.origin);
  fmt::print(out, "model       {} ({})\n", model.name, model.origin);
  fmt::print(out,
             "weights     {:.3g} parameters x {:.3f} bytes ({}) = {:.2f} GB; a decode step reads "
             "{:.2f} GB of them\n",
             model.parameters, deployment.precision.bytes_per_weight, deployment.precision.name,
             model.weight_bytes(deployment.precision) / 1e9,
             model.weight_bytes_read_per_step(deployment.precision) / 1e9);
  fmt::print(out,
             "KV cache    2 (K,V) x {} global layers x {} KV heads x {} head dim x {:g} bytes = "
             "{:.0f} bytes per token{}\n",
             model.global_layers(), model.kv_heads, model.head_dim, deployment.kv_bytes_per_element,
             2.0 * model.global_layers() * model.kv_heads * model.head_dim *
                 deployment.kv_bytes_per_element,
             model.windowed_layers() > 0
                 ? fmt::format(", plus {} layers capped at a {}-token window",
                               model.windowed_layers(), model.sliding_window)
                 : "");
  const MemoryBreakdown& memory = candidate.memory;
  fmt::print(
      out,
      "memory      {:.2f} weights + {:.2f} KV + {:.2f} activations + {:.2f} runtime = {:.2f} "
      "GB per device; usable {:.2f} = {:g} x (1 - {:g})\n",
      memory.weights_gb, memory.kv_cache_gb, memory.activations_gb, memory.runtime_gb,
      memory.total_gb, memory.usable_gb, memory.capacity_gb, request.headroom);
  const LoadPrediction& load = candidate.at_target;
  const double context = workload.input_tokens + workload.output_tokens / 2.0;
  const StepCost step = deployment.step(1 + std::max(0.0, load.decode_batch - 1), context);
  fmt::print(out,
             "decode      step at batch {:.1f}, context {:.0f}: max(({:.3f} GB weights + {:.3f} GB "
             "KV) / {:.0f} GB/s = {:.2f} ms, {:.3f} TFLOP / {:.1f} TFLOP/s = {:.2f} ms) + {:.2f} "
             "overhead + {:.2f} interconnect{} = {:.2f} ms ({} bound)\n",
             1 + std::max(0.0, load.decode_batch - 1), context, step.weight_bytes / 1e9,
             step.kv_bytes / 1e9,
             device.memory_bandwidth_gb_s * physical_efficiency(deployment.efficiency.bandwidth),
             step.memory_ms, step.flops / 1e12,
             deployment.precision.dense_tflops(device) *
                 physical_efficiency(deployment.efficiency.compute),
             step.compute_ms, step.overhead_ms, step.interconnect_ms,
             step.batch_correction_ms != 0
                 ? fmt::format(
                       " {:+.2f} calibrated batch correction (x{:.2f})", step.batch_correction_ms,
                       deployment.efficiency.decode_scale(1 + std::max(0.0, load.decode_batch - 1)))
                 : std::string(),
             step.total_ms, step.memory_bound() ? "memory" : "compute");
  fmt::print(out, "prefill     {} tokens{} in chunks of {}: {:.1f} ms alone\n",
             workload.input_tokens,
             workload.cached_prompt_tokens > 0
                 ? fmt::format(" ({} from the prefix cache)", workload.cached_prompt_tokens)
                 : "",
             deployment.step_token_budget,
             deployment.prefill_ms(workload.input_tokens, workload.cached_prompt_tokens));
  const bool open_loop = workload.rate_per_s > 0;
  fmt::print(
      out,
      "load        {} per replica: {:.2f} requests/s, prompts take {:.0f}% of engine time; "
      "TPOT mean {:.2f} ms; TTFT mean {:.0f}, p95 {:.0f}, p99 {:.0f} ms (simulated step by "
      "step: {})\n",
      open_loop ? fmt::format("{:.3g} req/s", workload.rate_per_s / std::max(1, candidate.replicas))
                : fmt::format("{:.0f} users", load.in_flight),
      load.request_throughput, load.prefill_share * 100, load.tpot_ms.mean, load.ttft_ms.mean,
      load.ttft_ms.p95, load.ttft_ms.p99,
      open_loop        ? "1,500 seeded Poisson arrivals"
      : workload.burst ? "every prompt queued at once"
                       : "each user's next request as the last one ends, after the first wave");
  fmt::print(out,
             "capacity    {} users per replica within the SLO -> {:.0f} output tokens/s; "
             "{} replica(s) of {} device(s) for the target load\n",
             candidate.max_concurrency, candidate.at_capacity.output_token_throughput,
             candidate.replicas, deployment.devices);
}

}  // namespace brisk::plan
