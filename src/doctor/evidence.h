#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/run_statistics.h"
#include "doctor/probe_lengths.h"
#include "telemetry/cpu_times.h"
#include "telemetry/nvml_sampler.h"

namespace brisk::doctor {

// What the machine did while one probe point ran: the telemetry readings whose interval (each
// covers the 250 ms before it) overlaps the point, so a point shorter than that gets the reading
// around it. A field is absent when no reading had it (no GPU, the server not on this machine).
struct PointResources {
  int readings = 0;
  std::optional<double> gpu_utilization_mean;       // fraction, over every GPU and reading
  std::optional<double> gpu_memory_used_bytes_max;  // all GPUs together, the highest reading
  std::optional<double> host_busy_cores_mean;       // every process
  std::optional<double> server_cores_mean;          // the server process
};

// One load point of the probe, summarized from brisk bench's records. Latencies are the
// client's (what a user waits for); server_* fields are what the server reported about the same
// requests (brisk's `brisk_timings`, llama-server's `timings`), -1 when it reported nothing.
struct ProbePoint {
  std::string stage;  // cold, short, long, ramp, prefix, mixed_short, mixed_long
  int concurrency = 1;
  int ok = 0;
  int failed = 0;
  double prompt_tokens_mean = 0;
  bench::LatencySummary ttft_ms;
  bench::LatencySummary itl_ms;
  bench::LatencySummary e2e_ms;
  double max_itl_ms = 0;  // the longest stall any stream of this point saw between two tokens
  double output_tokens_per_s = 0;
  double server_ttft_ms_p50 = -1;
  double server_queue_ms_p50 = -1;
  double outside_server_ms_p50 = -1;   // client TTFT − server TTFT per request, median
  double cached_prompt_fraction = -1;  // cached / prompt tokens, from the server's usage
  double duration_s = 0;
  // When its measured requests started and ended, in seconds from the probe's start (the
  // telemetry timeline's zero); -1: it did not run.
  double start_s = -1;
  double end_s = -1;
  PointResources resources;
  bool measured() const { return ok > 0; }
};

// What brisk serve's embedding batcher did during one embeddings load point: the change of its
// counters over the point (/metrics, brisk only). Absent from other servers.
struct EmbeddingBatcherDelta {
  double batches = 0;
  double batch_inputs = 0;
  double compute_ms = 0;      // the model's time on those batches
  double window_wait_ms = 0;  // every input's time queued before its batch began
  double waited_inputs = 0;
  double tokenize_ms = 0;     // the I/O threads' time tokenizing the point's requests
  double tokenized_requests = 0;
  double inputs_per_batch() const { return batches > 0 ? batch_inputs / batches : 0; }
  double window_wait_ms_mean() const { return waited_inputs > 0 ? window_wait_ms / waited_inputs : 0; }
  double compute_ms_per_batch() const { return batches > 0 ? compute_ms / batches : 0; }
  double tokenize_ms_per_request() const {
    return tokenized_requests > 0 ? tokenize_ms / tokenized_requests : 0;
  }
};

// One load point of the embeddings probe (`brisk doctor --endpoint embeddings`): requests of
// `inputs_per_request` inputs at `concurrency`, from the client's side, and what the batcher
// did meanwhile where the server says.
struct EmbeddingPoint {
  std::string stage;  // cold, ramp
  int concurrency = 1;
  int ok = 0;
  int failed = 0;
  bench::LatencySummary latency_ms;  // sent to whole answer
  double inputs_per_s = 0;
  double duration_s = 0;
  double start_s = -1;  // on the telemetry's clock, as ProbePoint's
  double end_s = -1;
  std::optional<EmbeddingBatcherDelta> batcher;
  PointResources resources;
  bool measured() const { return ok > 0; }
};

// The embeddings probe: a cold request, then a ramp that doubles concurrency from 1.
struct EmbeddingEvidence {
  std::string endpoint = "embeddings";  // or rerank: a query and inputs_per_request documents
  int input_tokens = 0;  // of each input
  int inputs_per_request = 1;
  EmbeddingPoint cold;
  std::vector<EmbeddingPoint> ramp;  // ramp[0] is the baseline at concurrency 1
  std::string ramp_stop_reason;
  bool probed() const { return cold.measured(); }
  const EmbeddingPoint* first() const;
  const EmbeddingPoint* top() const;
};

inline const EmbeddingPoint* EmbeddingEvidence::first() const {
  for (const EmbeddingPoint& point : ramp) {
    if (point.measured()) return &point;
  }
  return nullptr;
}

inline const EmbeddingPoint* EmbeddingEvidence::top() const {
  for (auto it = ramp.rbegin(); it != ramp.rend(); ++it) {
    if (it->measured()) return &*it;
  }
  return nullptr;
}

// What the server's /metrics showed during the probe (absent when it has none).
struct ServerMetricsSummary {
  std::string dialect;  // empty: no /metrics, or none of the known names
  std::string absent_reason;
  std::optional<double> waiting_max;
  std::optional<double> running_max;
  std::optional<double> kv_usage_max;
  std::optional<double> preemptions;          // counter increase over the probe
  std::optional<double> kv_full_blocks;       // steps that left requests waiting for KV room, ditto
  std::optional<double> prefix_query_tokens;  // over the repeated-prefix probe
  std::optional<double> prefix_hit_tokens;
  std::optional<double> prefix_hit_rate;
  // Several models on one brisk serve (docs/models.md), over the probe: the share of its wall
  // time the other models' steps held the device (all of them, and the busiest), the probed
  // model's own steps' share, and the share they spent waiting for the others' (the arbiter).
  std::optional<double> others_busy_share;
  std::string busiest_other_model;
  double busiest_other_share = 0;
  std::optional<double> own_busy_share;
  std::optional<double> arbiter_wait_share;
  std::optional<double> arbiter_wait_ms_mean;  // per step of the probed model
  // Models loaded and unloaded during the probe, every model of the server (docs/models.md,
  // "Memory budget"): loads (not at start), the model loaded most often, unloads by reason, and
  // the seconds the loads took.
  std::optional<double> model_loads;
  std::string most_loaded_model;
  double most_loaded_model_loads = 0;
  std::map<std::string, double> model_unloads_by_reason;
  std::optional<double> model_load_seconds;
  double scraped_seconds = 0;  // from the first scrape to the last: the span the counts cover
};

// Host CPU and memory from /proc while the probe ran, in cores (1.0 = one core all the time).
struct HostSummary {
  int cores = 0;
  double busy_cores_mean = 0;  // every process
  double steal_fraction = 0;   // of all cores' time
  double iowait_fraction = 0;
  double busiest_core_fraction = 0;
  // Each core's user/system/iowait/steal share of the probe's wall time: one busy core among
  // idle ones (a single-threaded frontend) hides in the mean of all of them.
  std::vector<telemetry::CoreShare> per_core;
  double doctor_cores_mean = 0;  // this process: the load generator's own cost
  // The server process, found from the listening port; -1 when it is not on this machine.
  int server_pid = -1;
  std::string server_command;
  double server_cores_mean = -1;
  int server_threads = 0;
  double other_cores_mean = 0;    // busy − server − doctor: other processes on the same cores
  std::string top_other_process;  // the biggest of them, "name (pid N)"
  double top_other_cores = 0;
  double memory_used_fraction_max = 0;
  double memory_total_bytes = 0;
};

struct GpuSummary {
  std::string absent_reason;               // set when there is no GPU telemetry
  std::vector<telemetry::GpuSample> peak;  // per GPU, the highest reading of each field
  std::vector<double> utilization_mean;    // per GPU, during load
  std::vector<telemetry::GpuLink> links;
  bool present() const { return !peak.empty(); }
};

// The limit a decode step cannot beat on this device: every weight read once per step.
struct HardwareFloor {
  double decode_ms_per_token = -1;  // -1: unknown (model or device not resolved)
  std::string device;               // catalog id
  std::string source;               // how it was computed
};

// Everything the rules look at. Every field is filled by the probe and telemetry; unit tests
// build it by hand from recorded numbers.
struct Evidence {
  std::string url;
  std::string model;
  ProbeLengths workload;
  ProbePoint cold;
  ProbePoint short_baseline;     // concurrency 1
  ProbePoint long_baseline;      // concurrency 1, unique long prompts
  std::vector<ProbePoint> ramp;  // ascending concurrency, short prompts
  std::string ramp_stop_reason;
  ProbePoint prefix;                  // prompts sharing a long prefix, same length as long_baseline
  double prefix_shared_fraction = 0;  // of each prefix-probe prompt
  ProbePoint mixed_short;             // short streams while long prompts arrive
  ProbePoint mixed_long;
  // The embeddings probe; unprobed (and the points above empty) for a chat model, and the other
  // way round.
  EmbeddingEvidence embeddings;
  // TTFT p50 of the short requests sent after the first wave (all users start at once, and a
  // short prompt that shares its very first step with a long one is not what a steady mix sees).
  double mixed_short_later_ttft_ms_p50 = -1;
  ServerMetricsSummary metrics;
  HostSummary host;
  GpuSummary gpu;
  HardwareFloor floor;
  std::optional<double> usd_per_hour;
  std::vector<std::string> slo_missed;  // at concurrency 1, each limit the short baseline missed
  double budget_s = 0;
  double elapsed_s = 0;
  std::vector<std::string> skipped;  // stages the budget or an error left out, with why
};

}  // namespace brisk::doctor
