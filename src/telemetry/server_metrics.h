#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/prometheus_text.h"

namespace brisk::telemetry {

// What the doctor reads from a server's /metrics, whichever server it is. Each is absent when
// the server does not export it. Gauges are the value at scrape time; *_total are counters.
struct ServerMetrics {
  std::string dialect;  // "brisk", "vllm", "sglang", "tgi", "llama.cpp"; empty: none known
  std::optional<double> requests_waiting;
  std::optional<double> requests_running;
  std::optional<double> kv_usage_fraction;  // 1 = the KV cache is full
  std::optional<double> preemptions_total;
  std::optional<double> prefix_query_tokens_total;  // prompt tokens looked up in a prefix cache
  std::optional<double> prefix_hit_tokens_total;    // of them, reused from it
  std::optional<double> prefix_hit_rate;            // a server that exports only the ratio
  // Engine steps that left requests waiting because their prompts did not fit in the KV cache
  // (brisk only: brisk_admission_blocked_steps_total{reason="kv_cache_full"}). A counter: a
  // usage gauge scraped every 250 ms can miss a cache that filled between scrapes, and
  // brisk's admission keeps usage just under full by design.
  std::optional<double> kv_full_blocks_total;
  // Requests refused, by reason (brisk only: brisk_requests_rejected_total{reason}).
  std::map<std::string, double> rejections_total;
  // Several models on one server (brisk only, docs/models.md): the time each model's steps held
  // the device (brisk_device_busy_seconds_total{model}), and the time the read model's steps
  // waited for the others' (brisk_arbiter_wait_seconds{model}: its sum and count).
  std::map<std::string, double> device_busy_seconds_by_model;
  std::optional<double> arbiter_wait_seconds_total;
  std::optional<double> arbiter_waits_total;
  // Models loaded and unloaded on demand (brisk only, docs/models.md, "Memory budget"), every
  // model of the server: loads by model (brisk_model_loads_total, those at start left out),
  // unloads by reason (brisk_model_unloads_total) and the seconds loads took
  // (brisk_model_load_seconds_sum).
  std::map<std::string, double> model_loads_by_model;
  std::map<std::string, double> model_unloads_by_reason;
  std::optional<double> model_load_seconds_total;
  // brisk's embedding batcher (brisk only, docs/metrics.md "Embeddings"), from its counters and
  // histograms' sums and counts; absent when the read model embeds nothing.
  struct EmbeddingBatcher {
    double batches = 0;              // brisk_embedding_batch_inputs_count
    double batch_inputs = 0;         // ..._sum: inputs in those batches
    double batch_tokens = 0;         // brisk_embedding_batch_tokens_sum
    double compute_seconds = 0;      // brisk_embedding_batch_compute_seconds_sum: the model's time
    double window_wait_seconds = 0;  // brisk_embedding_window_wait_seconds_sum, over every input
    double waited_inputs = 0;        // ..._count
    double tokenize_seconds = 0;     // brisk_embedding_tokenize_seconds_sum: the I/O threads' time
    double tokenized_requests = 0;   // ..._count
  };
  std::optional<EmbeddingBatcher> embedding;
  bool known() const { return !dialect.empty(); }
};

// What changed on the server between two scrapes around one load point (brisk bench's
// per-run "server" object, docs/bench-metrics.md): prefix-cache tokens looked up and reused and
// their ratio, preemptions, rejections by reason. A figure the server does not export is null.
nlohmann::json server_metrics_delta(const ServerMetrics& before, const ServerMetrics& after);

// Reads the first dialect whose names appear in `samples` (brisk's own first: brisk serve with
// --metrics-compat vllm exports both). Counts over several label values (models, engines) add
// up; a usage ratio is the highest of them. With `model`, a server that labels its series by
// model (brisk serving several) is read for that model alone, beside its unlabelled
// server-wide series.
ServerMetrics read_server_metrics(const std::vector<MetricSample>& samples,
                                  const std::string& model = {});

}  // namespace brisk::telemetry
