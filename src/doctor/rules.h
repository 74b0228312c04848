#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "doctor/evidence.h"
#include "doctor/finding.h"

namespace brisk::doctor {

// Each rule looks at the whole Evidence and returns a finding when its condition holds; a rule
// whose inputs were not measured returns nothing (no evidence is no alarm). Thresholds are below,
// and docs/doctor.md says why each is where it is.
namespace threshold {
// no_batching (without a running-requests gauge): throughput at the top of the ramp over
// concurrency 1 stays below this; compute_saturated: batching gained at least kBatchingGainMin.
constexpr double kBatchingGainMax = 1.5;
constexpr double kBatchingGainMin = 1.3;
// no_batching: a request at the top waits about as long as whole requests take alone.
constexpr double kSerializedTtftOfE2e = 0.5;
// no_batching: streams that share steps see their token gaps grow; serialized ones do not.
constexpr double kSerializedItlGrowthMax = 1.5;
// queueing: server-side queue time at the top of the ramp.
constexpr double kQueueMsMin = 50;
constexpr double kQueueShareOfTtft = 0.3;
// kv_cache_exhausted: peak usage, or engine steps whose admission left requests waiting for
// KV room (brisk's counter); a few such steps are a prompt briefly waiting for cells to free.
constexpr double kKvFullFraction = 0.9;
constexpr double kKvWaitStepsMin = 5;
// head_of_line_blocking: a short stream's longest stall, beyond its longest pause without long
// prompts, against one long prompt's prefill.
constexpr double kStallShareOfLongPrefill = 0.6;
constexpr double kLongPrefillMsMin = 250;
constexpr double kStallOverItl = 3;
// prefix_not_cached: repeated-prefix TTFT over unique-prompt TTFT of the same length.
constexpr double kPrefixTtftRatioMax = 0.7;
constexpr double kPrefixSharedFractionMin = 0.5;
// prefix_not_cached, where the server reports reuse: share of the probe's prompt tokens reused.
constexpr double kPrefixReusedFractionMin = 0.3;
// cpu_contention: other processes' CPU, in cores and as a share of the machine.
constexpr double kOtherCoresMin = 0.5;
constexpr double kOtherShareMin = 0.25;
constexpr double kStealFractionMin = 0.1;
// noisy_neighbour: other models of the same server held the device this share of the probe, and
// the probed model's steps spent this share of it waiting for them; critical from the second.
constexpr double kNeighbourBusyShareMin = 0.2;
constexpr double kArbiterWaitShareMin = 0.05;
constexpr double kArbiterWaitShareCritical = 0.25;
// model_swap_thrash: models loaded during the probe (not at start) while others were unloaded
// to make room or after --keep-alive; critical when the loads took this share of the probe.
constexpr double kSwapLoadsMin = 2;
constexpr double kSwapLoadShareCritical = 0.1;
// network_overhead: client TTFT − server TTFT at concurrency 1.
constexpr double kOutsideMsMin = 20;
constexpr double kOutsideShareOfTtft = 0.2;
// cold_start: first request's TTFT against warm ones.
constexpr double kColdExtraMsMin = 200;
constexpr double kColdRatioMin = 3;
// tail_latency_spikes: ITL p99 against p50 at one load point.
constexpr double kItlTailRatio = 6;
constexpr double kItlTailExtraMs = 150;
constexpr int kItlTailSamplesMin = 30;
// memory_headroom_low: the articles' rule (< 20% free is a risk, keep ~30%).
constexpr double kMemoryUsedWarn = 0.8;
constexpr double kMemoryUsedCritical = 0.95;
constexpr double kHostMemoryUsedWarn = 0.9;
// compute_saturated / model_on_cpu / cpu_bound_frontend: accelerator utilization.
constexpr double kGpuBusyMin = 0.9;
constexpr double kGpuIdleMax = 0.05;
constexpr double kGpuStarvedMax = 0.5;
constexpr double kFrontendCoresMin = 0.9;
constexpr double kServerCpuShareBusy = 0.75;  // of the cores not taken by others
constexpr double kNearFloorRatio = 2;
constexpr double kRampPlateauGain = 1.15;  // the ramp stops when a doubling adds less
// Embeddings (docs/doctor.md, "Embeddings"). no_batching: the batcher's batches hold fewer
// inputs than this while at least kEmbeddingQueuedMin inputs were in flight; without batcher
// counters, a server whose throughput gains less than kEmbeddingFlatGain while each request
// waits for about all the others (latency at least kSerializedLatencyShare of concurrency ×
// alone).
constexpr double kEmbeddingBatchInputsMin = 1.5;
constexpr int kEmbeddingQueuedMin = 4;
constexpr double kEmbeddingFlatGain = 1.15;
constexpr double kSerializedLatencyShare = 0.7;
// batch_window_too_long: at concurrency 1 the batching window's wait is this share of the
// median latency (critical from the second) and at least kWindowWaitMsMin.
constexpr double kWindowShareWarn = 0.25;
constexpr double kWindowShareCritical = 0.5;
constexpr double kWindowWaitMsMin = 2;
// cpu_bound_frontend (embeddings): tokenizing costs this share of the model's time (critical
// from the second).
constexpr double kTokenizeShareOfComputeWarn = 0.5;
constexpr double kTokenizeShareOfComputeCritical = 1.0;
}  // namespace threshold

using Rule = std::function<std::optional<Finding>(const Evidence&)>;

// Requests waited because their prompts did not fit in the server's KV cache (a counter only
// brisk exports; false when the server does not say).
inline bool waited_for_kv(const ServerMetricsSummary& metrics) {
  return metrics.kv_full_blocks && *metrics.kv_full_blocks >= threshold::kKvWaitStepsMin;
}

std::optional<Finding> check_no_batching(const Evidence& evidence);
std::optional<Finding> check_queueing(const Evidence& evidence);
std::optional<Finding> check_kv_cache_exhausted(const Evidence& evidence);
std::optional<Finding> check_head_of_line_blocking(const Evidence& evidence);
std::optional<Finding> check_prefix_not_cached(const Evidence& evidence);
std::optional<Finding> check_compute_saturated(const Evidence& evidence);
std::optional<Finding> check_cpu_contention(const Evidence& evidence);
std::optional<Finding> check_noisy_neighbour(const Evidence& evidence);
std::optional<Finding> check_model_swap_thrash(const Evidence& evidence);
std::optional<Finding> check_cpu_bound_frontend(const Evidence& evidence);
std::optional<Finding> check_model_on_cpu(const Evidence& evidence);
std::optional<Finding> check_memory_headroom_low(const Evidence& evidence);
std::optional<Finding> check_interconnect_limited(const Evidence& evidence);
std::optional<Finding> check_network_overhead(const Evidence& evidence);
std::optional<Finding> check_cold_start(const Evidence& evidence);
std::optional<Finding> check_tail_latency_spikes(const Evidence& evidence);
std::optional<Finding> check_batch_window_too_long(const Evidence& evidence);
// The embeddings probe's no_batching, cpu_bound_frontend and compute_saturated
// (rules_embeddings.cpp): the rules of
// those ids read them when the evidence is from an embeddings endpoint.
std::optional<Finding> embeddings_no_batching(const Evidence& evidence);
std::optional<Finding> embeddings_cpu_bound_frontend(const Evidence& evidence);
std::optional<Finding> embeddings_compute_saturated(const Evidence& evidence);

struct NamedRule {
  const char* id;
  Rule check;
};
// Every rule, in the order that breaks ties between findings of equal severity and impact:
// causes before the symptoms they produce (no batching causes queueing, not the reverse).
const std::vector<NamedRule>& all_rules();

// The ramp's top load point, or nullptr when the ramp did not run.
const ProbePoint* ramp_top(const Evidence& evidence);
const ProbePoint* ramp_first(const Evidence& evidence);

}  // namespace brisk::doctor
