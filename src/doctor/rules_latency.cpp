// Rules over where a single request's time goes: outside the server, the first request, and
// pauses in an otherwise steady stream.
#include <algorithm>

#include <fmt/format.h>

#include "doctor/rules.h"

namespace brisk::doctor {

using namespace threshold;

std::optional<Finding> check_network_overhead(const Evidence& evidence) {
  const ProbePoint& alone = evidence.short_baseline;
  if (!alone.measured() || alone.outside_server_ms_p50 < 0) return std::nullopt;
  const double outside = alone.outside_server_ms_p50;
  if (outside < kOutsideMsMin || outside < kOutsideShareOfTtft * alone.ttft_ms.p50) {
    return std::nullopt;
  }
  Finding finding{"network_overhead", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "{:.0f} ms of each request is spent outside the server's engine (network, proxies, HTTP "
      "frontend): {:.0f}% of the time to first token",
      outside, 100 * outside / std::max(1.0, alone.ttft_ms.p50));
  finding.evidence = {
      {"client TTFT − server TTFT (p50)", outside, "ms", "probe short c=1, client − server timings"},
      {"client TTFT p50", alone.ttft_ms.p50, "ms", "probe short c=1, client"},
      {"server TTFT p50", alone.server_ttft_ms_p50, "ms", "probe short c=1, server timings"}};
  finding.prescription =
      "move the client next to the server (same zone/host), drop proxies in between, keep "
      "connections alive; the server itself is not where this time goes";
  finding.impact = std::min(1.0, outside / std::max(1.0, alone.ttft_ms.p50));
  if (finding.impact >= 0.5) finding.severity = Severity::critical;
  return finding;
}

std::optional<Finding> check_cold_start(const Evidence& evidence) {
  const ProbePoint& cold = evidence.cold;
  const ProbePoint& warm = evidence.short_baseline;
  if (!cold.measured() || !warm.measured()) return std::nullopt;
  const double extra = cold.ttft_ms.p50 - warm.ttft_ms.p50;
  // Slower than every warm request too: on shared cores one request can be slow by chance.
  if (extra < kColdExtraMsMin || cold.ttft_ms.p50 < kColdRatioMin * warm.ttft_ms.p50 ||
      cold.ttft_ms.p50 <= warm.ttft_ms.max) {
    return std::nullopt;
  }
  Finding finding{"cold_start", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "the first request waited {:.0f} ms for its first token, warm ones {:.0f} ms: the server "
      "was cold",
      cold.ttft_ms.p50, warm.ttft_ms.p50);
  finding.evidence = {{"first request's TTFT", cold.ttft_ms.p50, "ms", "probe cold, client"},
                      {"warm TTFT p50", warm.ttft_ms.p50, "ms", "probe short c=1, client"}};
  if (cold.server_ttft_ms_p50 >= 0) {
    finding.evidence.push_back(
        {"first request's server TTFT", cold.server_ttft_ms_p50, "ms", "probe cold, server timings"});
  }
  finding.prescription =
      "warm the server before it takes traffic: send one request after start and only then "
      "report ready (a readiness probe that runs a completion), keep replicas warm instead of "
      "scaling from zero; llama-server: do not pass --no-warmup";
  finding.impact = std::min(1.0, extra / cold.ttft_ms.p50);
  return finding;
}

std::optional<Finding> check_tail_latency_spikes(const Evidence& evidence) {
  std::vector<const ProbePoint*> points = {&evidence.short_baseline};
  for (const ProbePoint& point : evidence.ramp) points.push_back(&point);
  const ProbePoint* worst = nullptr;
  for (const ProbePoint* point : points) {
    const bench::LatencySummary& itl = point->itl_ms;
    if (itl.count < static_cast<size_t>(kItlTailSamplesMin) || itl.p50 <= 0) continue;
    if (itl.p99 < kItlTailRatio * itl.p50 || itl.p99 - itl.p50 < kItlTailExtraMs) continue;
    if (!worst || itl.p99 / itl.p50 > worst->itl_ms.p99 / worst->itl_ms.p50) worst = point;
  }
  if (!worst) return std::nullopt;
  Finding finding{"tail_latency_spikes", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "streams pause now and then: ITL p99 {:.0f} ms against p50 {:.0f} ms at {} concurrent",
      worst->itl_ms.p99, worst->itl_ms.p50, worst->concurrency);
  const std::string source = fmt::format("probe {} c={}, client", worst->stage, worst->concurrency);
  finding.evidence = {{"ITL p99", worst->itl_ms.p99, "ms", source},
                      {"ITL p50", worst->itl_ms.p50, "ms", source},
                      {"longest gap", worst->max_itl_ms, "ms", source}};
  finding.prescription =
      "find what pauses the engine: other processes (see CPU), swapping, a garbage collector, "
      "prompt prefills between decode steps (brisk serve --target-itl-ms caps a step)";
  // A symptom whose cause is usually another finding (other processes, a long prefill): it
  // leads only when nothing explains it.
  finding.impact = 0.1;
  return finding;
}

const std::vector<NamedRule>& all_rules() {
  static const std::vector<NamedRule> rules = {
      {"model_on_cpu", check_model_on_cpu},
      {"kv_cache_exhausted", check_kv_cache_exhausted},
      {"no_batching", check_no_batching},
      {"batch_window_too_long", check_batch_window_too_long},
      {"cpu_contention", check_cpu_contention},
      {"noisy_neighbour", check_noisy_neighbour},
      {"model_swap_thrash", check_model_swap_thrash},
      {"network_overhead", check_network_overhead},
      {"head_of_line_blocking", check_head_of_line_blocking},
      {"prefix_not_cached", check_prefix_not_cached},
      {"cold_start", check_cold_start},
      {"cpu_bound_frontend", check_cpu_bound_frontend},
      {"interconnect_limited", check_interconnect_limited},
      {"memory_headroom_low", check_memory_headroom_low},
      {"queueing", check_queueing},
      {"tail_latency_spikes", check_tail_latency_spikes},
      {"compute_saturated", check_compute_saturated},
  };
  return rules;
}

}  // namespace brisk::doctor
