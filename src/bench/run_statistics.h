#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/request_record.h"
#include "bench/slo.h"
#include "common/clock.h"
#include "common/percentile.h"

namespace brisk::bench {

// Distribution summary of one latency metric, in milliseconds. Percentiles interpolate linearly
// between the closest ranks, as numpy.percentile does by default, so numbers compare 1:1 with
// vLLM's `bench serve`. `std` is the population standard deviation (numpy's default ddof=0).
struct LatencySummary {
  size_t count = 0;  // 0 means "no samples": every other field is then 0
  double mean = 0;
  double std = 0;
  double p50 = 0;
  double p90 = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;
};

using brisk::percentile_linear;  // common/percentile.h: brisk's one percentile definition
LatencySummary summarize(std::vector<double> samples);

// The figures of one load point. Latencies use successful requests only; see
// docs/bench-metrics.md for each definition.
struct RunStatistics {
  int ok = 0;
  int failed = 0;
  int timeouts = 0;
  std::map<std::string, int> errors;  // error kind name → count, failed requests only

  LatencySummary ttft_ms;  // origin → first non-empty content chunk
  LatencySummary itl_ms;   // every gap between consecutive content chunks, pooled
  // The samples behind ttft_ms and itl_ms, ascending: report.html draws their distributions.
  std::vector<double> ttft_samples_ms;
  std::vector<double> itl_samples_ms;
  LatencySummary tpot_ms;  // per request (E2E − TTFT) / (completion_tokens − 1), ≥ 2 tokens
  LatencySummary e2e_ms;   // origin → end
  LatencySummary schedule_lag_ms;  // scheduled → sent: how far the client fell behind its plan
  double achieved_rate = 0;        // measured requests sent per second (first → last send)
  // Requests per second meeting every per-request limit of the SLO (0 without one).
  double goodput = 0;
  int good_requests = 0;

  double duration_s = 0;               // first scheduled send → last end
  double request_throughput = 0;       // successful requests per second
  double input_token_throughput = 0;   // usage.prompt_tokens of successes per second
  double output_token_throughput = 0;  // usage.completion_tokens of successes per second
  long total_input_tokens = 0;
  long total_output_tokens = 0;
  // Why the run was cut short (RunResult::abandoned, copied by its caller); empty otherwise.
  std::string abandoned;
  // Embeddings runs: vectors received, and per second.
  long total_embeddings = 0;
  double embedding_throughput = 0;

  // Successful streamed requests whose content-chunk count differs from
  // usage.completion_tokens: the server batches several tokens per chunk (ITL then
  // over-states per-token latency) or reports usage differently. Reported, never corrected.
  int chunk_token_mismatch = 0;
  // Measured requests that opened their connection, so that their setup preceded `sent` (in
  // open loop: inside their latency).
  int new_connections = 0;
  // Successful requests the server reported no usage.completion_tokens for (it ignored
  // stream_options.include_usage): their output tokens are counted as content chunks, which is
  // exact only for a server that sends one token per chunk, and no input tokens are counted.
  int requests_without_usage = 0;
  // ITL samples of exactly 0: chunks that came in one socket read share its timestamp (the
  // server wrote them back to back, or the client read late). Kept in itl_ms, and counted.
  int itl_same_read_gaps = 0;
};

// Where latencies start. Open loop: the scheduled time, so queueing in the client or server
// cannot hide (no coordinated omission). Closed loop: the send, after the connection exists.
enum class LatencyOrigin { sent, scheduled };

// Computes the statistics of the measured (non-warmup) requests of one run that lasted from
// `run_start` to `run_end`.
RunStatistics compute_run_statistics(const std::vector<RequestRecord>& records, TimePoint run_start,
                                     TimePoint run_end, LatencyOrigin origin = LatencyOrigin::sent,
                                     const Slo* slo = nullptr);

}  // namespace brisk::bench
