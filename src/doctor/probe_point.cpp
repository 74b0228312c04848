#include "doctor/probe_point.h"

#include <algorithm>

#include "common/percentile.h"

namespace brisk::doctor {

namespace {

double median_or(std::vector<double> values, double absent) {
  if (values.empty()) return absent;
  std::sort(values.begin(), values.end());
  return percentile_linear(values, 50);
}

}  // namespace

ProbePoint summarize_point(const std::string& stage, int concurrency, const bench::RunResult& run,
                           const std::function<bool(const bench::RequestRecord&)>& keep) {
  std::vector<bench::RequestRecord> kept;
  for (const bench::RequestRecord& record : run.records) {
    if (!keep || keep(record)) kept.push_back(record);
  }
  const bench::RunStatistics stats = bench::compute_run_statistics(kept, run.start, run.end);
  ProbePoint point;
  point.stage = stage;
  point.concurrency = concurrency;
  point.ok = stats.ok;
  point.failed = stats.failed;
  point.ttft_ms = stats.ttft_ms;
  point.itl_ms = stats.itl_ms;
  point.e2e_ms = stats.e2e_ms;
  point.max_itl_ms = stats.itl_ms.max;
  point.output_tokens_per_s = stats.output_token_throughput;
  point.duration_s = stats.duration_s;
  std::vector<double> server_ttft, server_queue, outside;
  double prompt_tokens = 0, cached_tokens = 0;
  int with_prompt = 0, with_cache = 0;
  for (const bench::RequestRecord& record : kept) {
    if (record.warmup || !record.ok()) continue;
    if (record.prompt_tokens > 0) {
      prompt_tokens += record.prompt_tokens;
      ++with_prompt;
    }
    if (record.cached_prompt_tokens >= 0 && record.prompt_tokens > 0) {
      cached_tokens += static_cast<double>(record.cached_prompt_tokens) / record.prompt_tokens;
      ++with_cache;
    }
    if (record.server_ttft_ms >= 0) {
      server_ttft.push_back(record.server_ttft_ms);
      if (record.has_first_content()) {
        outside.push_back(ms_between(record.sent, record.first_content()) - record.server_ttft_ms);
      }
    }
    if (record.server_queue_ms >= 0) server_queue.push_back(record.server_queue_ms);
  }
  point.prompt_tokens_mean = with_prompt ? prompt_tokens / with_prompt : 0;
  point.cached_prompt_fraction = with_cache ? cached_tokens / with_cache : -1;
  point.server_ttft_ms_p50 = median_or(server_ttft, -1);
  point.server_queue_ms_p50 = median_or(server_queue, -1);
  point.outside_server_ms_p50 = median_or(outside, -1);
  return point;
}

}  // namespace brisk::doctor
