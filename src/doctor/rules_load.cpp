// Rules over the probe's load points: batching, queueing, the KV cache, prefill scheduling and
// the prefix cache, and whether the device itself is the limit.
#include <algorithm>

#include <fmt/format.h>

#include "doctor/rules.h"

namespace brisk::doctor {

using namespace threshold;

namespace {

std::string point_source(const ProbePoint& point, const char* side = "client") {
  return fmt::format("probe {} c={}, {}", point.stage, point.concurrency, side);
}

}  // namespace

const ProbePoint* ramp_top(const Evidence& evidence) {
  for (auto it = evidence.ramp.rbegin(); it != evidence.ramp.rend(); ++it) {
    if (it->measured()) return &*it;
  }
  return nullptr;
}

const ProbePoint* ramp_first(const Evidence& evidence) {
  for (const ProbePoint& point : evidence.ramp) {
    if (point.measured()) return &point;
  }
  return nullptr;
}

std::optional<Finding> check_no_batching(const Evidence& evidence) {
  if (evidence.embeddings.probed()) return embeddings_no_batching(evidence);
  const ProbePoint* first = ramp_first(evidence);
  const ProbePoint* top = ramp_top(evidence);
  if (!first || !top || top->concurrency < 2 * first->concurrency ||
      first->output_tokens_per_s <= 0) {
    return std::nullopt;
  }
  const double gain = top->output_tokens_per_s / first->output_tokens_per_s;
  const bool requests_wait_for_requests =
      top->ttft_ms.p50 >= kSerializedTtftOfE2e * first->e2e_ms.p50;
  const bool streams_do_not_share_steps =
      first->itl_ms.count > 0 && top->itl_ms.p50 <= kSerializedItlGrowthMax * first->itl_ms.p50;
  const ServerMetricsSummary& metrics = evidence.metrics;
  // The server's own gauges are direct evidence either way; the latencies stand in without
  // them. Measured throughput alone is not trusted: on shared cores one noisy load point
  // changes it several times over, while the shape of TTFT and ITL survives.
  const bool has_running_gauge = metrics.running_max.has_value();
  // One running with others waiting is no batching only when the server was not waiting for
  // KV room: then the cache is the limit (kv_cache_exhausted), not the batch.
  const bool server_runs_one = has_running_gauge && *metrics.running_max <= 1 &&
                               metrics.waiting_max && *metrics.waiting_max >= 1 &&
                               !waited_for_kv(metrics);
  const bool serialized = !has_running_gauge && requests_wait_for_requests &&
                          streams_do_not_share_steps && gain < kBatchingGainMax;
  if (!server_runs_one && !serialized) return std::nullopt;
  Finding finding{"no_batching", Severity::critical, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "requests run one after another: at {} concurrent a request waits {:.0f} ms for its first "
      "token (alone a whole request takes {:.0f} ms) and streams do not share steps (ITL {:.0f} "
      "vs {:.0f} ms alone); throughput {:.1f} vs {:.1f} tokens/s",
      top->concurrency, top->ttft_ms.p50, first->e2e_ms.p50, top->itl_ms.p50, first->itl_ms.p50,
      top->output_tokens_per_s, first->output_tokens_per_s);
  finding.evidence = {
      {"output throughput gain", gain, "x", point_source(*top) + " / " + point_source(*first)},
      {"TTFT p50 at the top", top->ttft_ms.p50, "ms", point_source(*top)},
      {"E2E p50 alone", first->e2e_ms.p50, "ms", point_source(*first)},
      {"ITL p50 at the top", top->itl_ms.p50, "ms", point_source(*top)},
      {"ITL p50 alone", first->itl_ms.p50, "ms", point_source(*first)}};
  if (evidence.metrics.running_max) {
    finding.evidence.push_back({"requests running (max)", *evidence.metrics.running_max, "",
                                "/metrics (" + evidence.metrics.dialect + ")"});
  }
  finding.prescription =
      "let the server batch: brisk serve --max-seqs N (e.g. 16; each running request needs KV "
      "room in --ctx-size); llama-server -np N; vLLM --max-num-seqs; TGI --max-batch-size";
  finding.serve_flags = {"--max-seqs", "16"};
  // What batching would give back: about the concurrency's worth of throughput.
  finding.impact = 1.0 - static_cast<double>(first->concurrency) / top->concurrency;
  return finding;
}

std::optional<Finding> check_queueing(const Evidence& evidence) {
  const ProbePoint* top = ramp_top(evidence);
  if (!top) return std::nullopt;
  // A request that arrives while a step runs waits for it to end before it is scheduled (in a
  // closed loop it arrives just after one began): up to one step, the ITL at this load, is the
  // step boundary, not a queue for capacity. Counted as queueing, it fired on brisk serve's
  // defaults at 4 streams on a slow day (64 ms of a 175 ms TTFT; CI, 2026-12-02).
  const double beyond_step_ms = top->server_queue_ms_p50 - std::max(0.0, top->itl_ms.p50);
  const bool server_queue = beyond_step_ms >= kQueueMsMin &&
                            beyond_step_ms >= kQueueShareOfTtft * top->ttft_ms.p50;
  const bool metrics_queue = evidence.metrics.waiting_max &&
                             *evidence.metrics.waiting_max >= std::max(1.0, top->concurrency / 2.0);
  if (!server_queue && !(top->server_queue_ms_p50 < 0 && metrics_queue)) return std::nullopt;
  Finding finding{"queueing", Severity::warning, "", {}, "", 0, {}};
  const double queue_ms = std::max(0.0, top->server_queue_ms_p50);
  finding.summary = fmt::format(
      "requests wait in the server's queue at {} concurrent: {:.0f} ms of a {:.0f} ms TTFT "
      "(p50)",
      top->concurrency, queue_ms, top->ttft_ms.p50);
  if (top->server_queue_ms_p50 >= 0) {
    finding.evidence.push_back(
        {"queue time p50", top->server_queue_ms_p50, "ms", point_source(*top, "server timings")});
  }
  finding.evidence.push_back({"TTFT p50", top->ttft_ms.p50, "ms", point_source(*top)});
  if (evidence.metrics.waiting_max) {
    finding.evidence.push_back({"requests waiting (max)", *evidence.metrics.waiting_max, "",
                                "/metrics (" + evidence.metrics.dialect + ")"});
  }
  finding.prescription =
      "more requests arrive than run at once: raise brisk serve --max-seqs if memory allows, "
      "or add replicas; keep the queue short with --max-queued-requests / --max-queue-delay-ms "
      "so overload is refused (429) instead of waiting";
  if (evidence.metrics.running_max && *evidence.metrics.running_max >= 1) {
    finding.serve_flags = {"--max-seqs",
                           std::to_string(2 * static_cast<int>(*evidence.metrics.running_max))};
  }
  finding.impact = top->ttft_ms.p50 > 0 ? std::min(1.0, queue_ms / top->e2e_ms.p50) : 0;
  return finding;
}

std::optional<Finding> check_kv_cache_exhausted(const Evidence& evidence) {
  const ServerMetricsSummary& metrics = evidence.metrics;
  const bool full = metrics.kv_usage_max && *metrics.kv_usage_max >= kKvFullFraction;
  const bool preempted = metrics.preemptions && *metrics.preemptions > 0;
  const bool kv_waits = waited_for_kv(metrics);
  if (!full && !preempted && !kv_waits) return std::nullopt;
  const ProbePoint* top = ramp_top(evidence);
  const bool capped = top && metrics.running_max && *metrics.running_max < top->concurrency &&
                      metrics.waiting_max && *metrics.waiting_max >= 1;
  const bool critical = preempted || capped || kv_waits;
  Finding finding{
      "kv_cache_exhausted", critical ? Severity::critical : Severity::warning, "", {}, "", 0, {}};
  const std::string source = "/metrics (" + metrics.dialect + ")";
  finding.summary = fmt::format(
      "the KV cache is full ({:.0f}% at peak){}{}{}", metrics.kv_usage_max.value_or(0) * 100,
      preempted ? fmt::format(", {:.0f} running requests were preempted", *metrics.preemptions)
                : "",
      kv_waits
          ? fmt::format(", {:.0f} steps left requests waiting for KV room", *metrics.kv_full_blocks)
          : "",
      capped ? fmt::format(": only {:.0f} of {} requests could run, the rest waited — low "
                           "utilization because KV is full",
                           *metrics.running_max, top->concurrency)
             : "");
  if (metrics.kv_usage_max) {
    finding.evidence.push_back({"KV cache usage (max)", *metrics.kv_usage_max, "fraction", source});
  }
  if (metrics.preemptions) {
    finding.evidence.push_back({"preemptions", *metrics.preemptions, "", source});
  }
  if (metrics.kv_full_blocks) {
    finding.evidence.push_back(
        {"steps that left requests waiting for KV room", *metrics.kv_full_blocks, "", source});
  }
  if (metrics.running_max) {
    finding.evidence.push_back({"requests running (max)", *metrics.running_max, "", source});
  }
  if (top) {
    finding.evidence.push_back(
        {"concurrency offered", double(top->concurrency), "", point_source(*top)});
  }
  finding.prescription =
      "give the KV cache room for the concurrent requests: brisk serve --ctx-size (KV tokens "
      "shared by all requests; each needs prompt + output) or fewer --max-seqs; vLLM "
      "--gpu-memory-utilization / --max-model-len; llama-server -c";
  finding.impact = critical ? 0.8 : 0.3;
  return finding;
}

std::optional<Finding> check_head_of_line_blocking(const Evidence& evidence) {
  const ProbePoint& shorts = evidence.mixed_short;
  const ProbePoint& longs = evidence.long_baseline;
  if (!shorts.measured() || !longs.measured()) return std::nullopt;
  // Short requests that waited because the long ones held the KV cache wait for room, not for
  // a prefill: that is kv_cache_exhausted, and chunking would not help them.
  if (waited_for_kv(evidence.metrics)) return std::nullopt;
  const double long_prefill_ms =
      longs.server_ttft_ms_p50 > 0 ? longs.server_ttft_ms_p50 : longs.ttft_ms.p50;
  if (long_prefill_ms < kLongPrefillMsMin) return std::nullopt;
  const double itl_alone = evidence.short_baseline.itl_ms.p50;
  const double stall_ms = std::max(shorts.max_itl_ms, evidence.mixed_short_later_ttft_ms_p50);
  // The longest pause a short stream had with no long prompt about is the machine's own (a
  // shared machine's other work preempting the server's threads for a second or more: CI,
  // 2026-12-02). Only what the long prompts add beyond it is theirs.
  const double pause_alone_ms = std::max(0.0, evidence.short_baseline.max_itl_ms);
  const double added_ms = stall_ms - pause_alone_ms;
  if (added_ms < kStallShareOfLongPrefill * long_prefill_ms ||
      (itl_alone > 0 && stall_ms < kStallOverItl * itl_alone)) {
    return std::nullopt;
  }
  Finding finding{"head_of_line_blocking", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "a long prompt stops short requests: they stalled {:.0f} ms while a {:.0f}-token prompt "
      "was prefilled (its prefill alone: {:.0f} ms)",
      stall_ms, longs.prompt_tokens_mean, long_prefill_ms);
  finding.evidence = {
      {"short streams' longest gap between tokens", shorts.max_itl_ms, "ms", point_source(shorts)},
      {"TTFT p50 of short requests sent among long ones", evidence.mixed_short_later_ttft_ms_p50,
       "ms", point_source(shorts)},
      {"long prompt's prefill alone", long_prefill_ms, "ms",
       point_source(longs, longs.server_ttft_ms_p50 > 0 ? "server timings" : "client")},
      {"ITL p50 without long prompts", itl_alone, "ms", point_source(evidence.short_baseline)},
      {"longest gap without long prompts", pause_alone_ms, "ms",
       point_source(evidence.short_baseline)}};
  finding.prescription =
      "prefill long prompts in chunks between decode steps: brisk serve --target-itl-ms 150 "
      "--long-prefill-tokens 256 --max-batched-tokens 512 (the defaults); vLLM "
      "--enable-chunked-prefill --max-num-batched-tokens 512; llama-server -b/-ub 256";
  finding.serve_flags = {"--target-itl-ms", "150", "--long-prefill-tokens", "256",
                         "--max-batched-tokens", "512"};
  finding.impact = std::min(1.0, stall_ms / (stall_ms + std::max(1.0, shorts.e2e_ms.p50)));
  return finding;
}

std::optional<Finding> check_prefix_not_cached(const Evidence& evidence) {
  const ProbePoint& repeated = evidence.prefix;
  const ProbePoint& unique = evidence.long_baseline;
  if (!repeated.measured() || !unique.measured() ||
      evidence.prefix_shared_fraction < kPrefixSharedFractionMin) {
    return std::nullopt;
  }
  // What the server says it reused is direct evidence: its counters over this probe, else the
  // cached tokens it reported in `usage`. TTFT decides where it says nothing.
  std::optional<double> reused;
  if (evidence.metrics.prefix_query_tokens && *evidence.metrics.prefix_query_tokens > 0) {
    reused = evidence.metrics.prefix_hit_tokens.value_or(0) / *evidence.metrics.prefix_query_tokens;
  } else if (repeated.cached_prompt_fraction >= 0) {
    reused = repeated.cached_prompt_fraction;
  }
  // Server-side TTFT where both have it: network time is the same either way and would only
  // dilute the ratio.
  const bool server_side = repeated.server_ttft_ms_p50 > 0 && unique.server_ttft_ms_p50 > 0;
  const double repeated_ms = server_side ? repeated.server_ttft_ms_p50 : repeated.ttft_ms.p50;
  const double unique_ms = server_side ? unique.server_ttft_ms_p50 : unique.ttft_ms.p50;
  if (unique_ms <= 0) return std::nullopt;
  if (reused ? *reused >= kPrefixReusedFractionMin
             : repeated_ms < kPrefixTtftRatioMax * unique_ms) {
    return std::nullopt;
  }
  const char* side = server_side ? "server timings" : "client";
  Finding finding{"prefix_not_cached", Severity::warning, "", {}, "", 0, {}};
  finding.summary = fmt::format(
      "repeated prompt prefixes are recomputed: prompts sharing {:.0f}% of their tokens take "
      "{:.0f} ms to the first token, unique prompts of the same length {:.0f} ms",
      evidence.prefix_shared_fraction * 100, repeated_ms, unique_ms);
  finding.evidence = {
      {"TTFT p50, shared prefix", repeated_ms, "ms", point_source(repeated, side)},
      {"TTFT p50, unique prompts", unique_ms, "ms", point_source(unique, side)},
      {"shared part of each prompt", evidence.prefix_shared_fraction, "fraction", "probe design"}};
  if (evidence.metrics.prefix_query_tokens && *evidence.metrics.prefix_query_tokens > 0) {
    finding.evidence.push_back(
        {"prefix-cache hit tokens / queried",
         evidence.metrics.prefix_hit_tokens.value_or(0) / *evidence.metrics.prefix_query_tokens,
         "fraction", "/metrics (" + evidence.metrics.dialect + ")"});
  }
  if (repeated.cached_prompt_fraction >= 0) {
    finding.evidence.push_back({"cached prompt tokens", repeated.cached_prompt_fraction, "fraction",
                                point_source(repeated, "usage")});
  }
  finding.prescription =
      "turn on prefix caching so a repeated system prompt is computed once: brisk serve "
      "--prefix-cache on; vLLM --enable-prefix-caching; llama-server keeps it per slot "
      "(cache_prompt, --swa-full on sliding-window models); SGLang's radix cache";
  finding.serve_flags = {"--prefix-cache", "on"};
  finding.impact = std::min(1.0, evidence.prefix_shared_fraction * repeated.ttft_ms.p50 /
                                     std::max(1.0, repeated.e2e_ms.p50));
  return finding;
}

std::optional<Finding> check_compute_saturated(const Evidence& evidence) {
  if (evidence.embeddings.probed()) return embeddings_compute_saturated(evidence);
  const ProbePoint* first = ramp_first(evidence);
  const ProbePoint* top = ramp_top(evidence);
  const HostSummary& host = evidence.host;
  bool device_busy = false;
  std::vector<EvidenceItem> items;
  if (evidence.gpu.present()) {
    double mean = 0;
    for (double value : evidence.gpu.utilization_mean) mean = std::max(mean, value);
    device_busy = mean >= kGpuBusyMin;
    items.push_back({"GPU utilization (mean, busiest GPU)", mean, "fraction", "NVML"});
  } else if (host.server_cores_mean >= 0 && host.cores > 0) {
    const double available = std::max(0.5, host.cores - host.other_cores_mean);
    device_busy = host.server_cores_mean >= kServerCpuShareBusy * available;
    items.push_back({"server CPU (mean)", host.server_cores_mean, "cores", "/proc/PID/stat"});
  }
  const bool plateau = top && first && top != first && evidence.ramp_stop_reason == "plateau" &&
                       top->output_tokens_per_s >= kBatchingGainMin * first->output_tokens_per_s;
  const double floor_ms = evidence.floor.decode_ms_per_token;
  const double itl_alone = first ? first->itl_ms.p50 : 0;
  const bool near_floor = floor_ms > 0 && itl_alone > 0 && itl_alone <= kNearFloorRatio * floor_ms;
  if (!(device_busy && (plateau || near_floor))) return std::nullopt;
  Finding finding{"compute_saturated",
                  evidence.slo_missed.empty() ? Severity::info : Severity::warning,
                  "",
                  {},
                  "",
                  0,
                  {}};
  finding.summary =
      plateau ? fmt::format(
                    "the device is the limit: throughput stops growing at {:.1f} tokens/s "
                    "({} concurrent) with the device busy",
                    top->output_tokens_per_s, top->concurrency)
              : fmt::format(
                    "decode runs at {:.1f}x the hardware floor ({:.1f} ms/token) with the "
                    "device busy",
                    itl_alone / floor_ms, floor_ms);
  finding.evidence = items;
  if (plateau) {
    finding.evidence.push_back(
        {"output throughput at the top", top->output_tokens_per_s, "tokens/s", point_source(*top)});
  }
  if (floor_ms > 0 && itl_alone > 0) {
    finding.evidence.push_back({"ITL p50 alone", itl_alone, "ms", point_source(*first)});
    finding.evidence.push_back({"decode floor", floor_ms, "ms/token", evidence.floor.source});
  }
  finding.prescription =
      "the server uses the device well; more (or faster) accelerator is the fix for more "
      "throughput or lower latency — brisk plan sizes it";
  finding.impact = 0.5;
  return finding;
}

}  // namespace brisk::doctor
