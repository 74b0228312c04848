#include "bench/run_statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace brisk::bench {

LatencySummary summarize(std::vector<double> samples) {
  LatencySummary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  const double n = static_cast<double>(samples.size());
  summary.count = samples.size();
  summary.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  double squares = 0;
  for (const double x : samples) squares += (x - summary.mean) * (x - summary.mean);
  summary.std = std::sqrt(squares / n);
  summary.p50 = percentile_linear(samples, 50);
  summary.p90 = percentile_linear(samples, 90);
  summary.p95 = percentile_linear(samples, 95);
  summary.p99 = percentile_linear(samples, 99);
  summary.max = samples.back();
  return summary;
}

RunStatistics compute_run_statistics(const std::vector<RequestRecord>& records, TimePoint run_start,
                                     TimePoint run_end, LatencyOrigin origin, const Slo* slo) {
  RunStatistics stats;
  std::vector<double> ttft, itl, tpot, e2e, lag;
  TimePoint first_send = TimePoint::max(), last_send = TimePoint::min();
  int sends = 0;
  for (const RequestRecord& record : records) {
    if (record.warmup) continue;
    if (record.new_connection) ++stats.new_connections;
    if (record.sent != TimePoint{} && record.scheduled != TimePoint{}) {
      lag.push_back(ms_between(record.scheduled, record.sent));
      first_send = std::min(first_send, record.sent);
      last_send = std::max(last_send, record.sent);
      ++sends;
    }
    if (!record.ok()) {
      ++stats.failed;
      if (record.error == RequestError::timeout) ++stats.timeouts;
      ++stats.errors[std::string(error_name(record.error))];
      continue;
    }
    ++stats.ok;
    const TimePoint start = origin == LatencyOrigin::scheduled ? record.scheduled : record.sent;
    const double e2e_ms = ms_between(start, record.end);
    e2e.push_back(e2e_ms);
    const auto& chunks = record.content_chunks;
    if (record.prompt_tokens > 0) stats.total_input_tokens += record.prompt_tokens;
    if (record.embeddings > 0) stats.total_embeddings += record.embeddings;
    if (record.completion_tokens >= 0) {
      stats.total_output_tokens += record.completion_tokens;
    } else {
      ++stats.requests_without_usage;
      stats.total_output_tokens += static_cast<long>(chunks.size());
    }

    if (chunks.empty()) {  // non-streamed, or no text at all: no TTFT to speak of
      if (slo != nullptr && slo->request_meets(e2e_ms, std::nullopt, e2e_ms)) ++stats.good_requests;
      continue;
    }
    const double ttft_ms = ms_between(start, chunks.front());
    ttft.push_back(ttft_ms);
    for (size_t i = 1; i < chunks.size(); ++i) {
      itl.push_back(ms_between(chunks[i - 1], chunks[i]));
      if (chunks[i] == chunks[i - 1]) ++stats.itl_same_read_gaps;
    }
    // Servers that omit usage still get a TPOT, counted in chunks (the best guess available).
    const int tokens =
        record.completion_tokens >= 0 ? record.completion_tokens : static_cast<int>(chunks.size());
    std::optional<double> tpot_ms;
    if (tokens >= 2) tpot_ms = (e2e_ms - ttft_ms) / (tokens - 1);
    if (tpot_ms) tpot.push_back(*tpot_ms);
    if (slo != nullptr && slo->request_meets(ttft_ms, tpot_ms, e2e_ms)) ++stats.good_requests;
    if (record.streamed && record.completion_tokens >= 0 &&
        record.completion_tokens != static_cast<int>(chunks.size())) {
      ++stats.chunk_token_mismatch;
    }
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(itl.begin(), itl.end());
  stats.ttft_ms = summarize(ttft);
  stats.itl_ms = summarize(itl);
  stats.ttft_samples_ms = std::move(ttft);
  stats.itl_samples_ms = std::move(itl);
  stats.tpot_ms = summarize(std::move(tpot));
  stats.e2e_ms = summarize(std::move(e2e));
  stats.schedule_lag_ms = summarize(std::move(lag));
  if (sends > 1 && last_send > first_send) {
    stats.achieved_rate = (sends - 1) / seconds_between(first_send, last_send);
  }
  stats.duration_s = seconds_between(run_start, run_end);
  if (stats.duration_s > 0) {
    stats.request_throughput = stats.ok / stats.duration_s;
    stats.input_token_throughput = stats.total_input_tokens / stats.duration_s;
    stats.output_token_throughput = stats.total_output_tokens / stats.duration_s;
    stats.embedding_throughput = stats.total_embeddings / stats.duration_s;
    stats.goodput = stats.good_requests / stats.duration_s;
  }
  return stats;
}

}  // namespace brisk::bench
