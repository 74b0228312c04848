#include "plan/trace_summary.h"

#include <algorithm>
#include <cmath>

#include "common/percentile.h"

namespace brisk::plan {

std::optional<double> arrival_rate_per_s(const std::vector<TraceRecord>& records) {
  if (records.size() < 2) return std::nullopt;
  const auto [first, last] = std::minmax_element(
      records.begin(), records.end(),
      [](const TraceRecord& a, const TraceRecord& b) { return a.arrival_s < b.arrival_s; });
  const double span_s = last->arrival_s - first->arrival_s;
  if (span_s <= 0) return std::nullopt;
  return static_cast<double>(records.size() - 1) / span_s;
}

LengthStats length_stats(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (const double value : values) sum += value;
  return {sum / static_cast<double>(values.size()), percentile_linear(values, 50),
          percentile_linear(values, 90), percentile_linear(values, 99), values.back()};
}

TraceSummary summarize_trace(const Trace& trace, const std::string& file) {
  TraceSummary summary;
  summary.file = file;
  summary.format = trace.format;
  summary.requests = static_cast<int>(trace.records.size());
  std::vector<double> input_tokens, output_tokens;
  double first_s = 0, last_s = 0;
  for (const TraceRecord& record : trace.records) {
    input_tokens.push_back(record.input_tokens);
    output_tokens.push_back(record.output_tokens);
    first_s = std::min(first_s, record.arrival_s);
    last_s = std::max(last_s, record.arrival_s);
  }
  summary.span_s = trace.records.empty() ? 0 : last_s - first_s;
  summary.rate_per_s = arrival_rate_per_s(trace.records);
  summary.input_tokens = length_stats(std::move(input_tokens));
  summary.output_tokens = length_stats(std::move(output_tokens));
  summary.prefix_shared_fraction = prefix_sharing_ratio(trace.records);
  return summary;
}

std::optional<TraceSummary> read_trace_summary(const std::string& file, TraceFormat format,
                                               std::string* error) {
  const auto trace = read_trace_file(file, format, *error);
  if (!trace) return std::nullopt;
  return summarize_trace(*trace, file);
}

void apply_trace_summary(TraceSummary& trace, const GivenFlags& given, Workload& workload) {
  trace.used_for.clear();
  // The planner simulates one fixed length per request: the mean keeps the trace's token totals.
  if (!given.input_tokens) {
    workload.input_tokens = std::max(1, static_cast<int>(std::lround(trace.input_tokens.mean)));
    trace.used_for.push_back("input_tokens");
  }
  if (!given.output_tokens) {
    workload.output_tokens = std::max(1, static_cast<int>(std::lround(trace.output_tokens.mean)));
    trace.used_for.push_back("output_tokens");
  }
  if (!given.load) {
    if (trace.rate_per_s) {
      workload.rate_per_s = *trace.rate_per_s;
      trace.used_for.push_back("rate");
    } else if (trace.requests > 1) {
      workload.burst = true;
      workload.concurrency = trace.requests;
      trace.used_for.push_back("burst");
    }
  }
  workload.cached_prompt_tokens = 0;
  if (trace.prefix_shared_fraction && *trace.prefix_shared_fraction > 0) {
    // The last prompt token is always computed: its logits sample the first output token.
    const int cached = static_cast<int>(
        std::lround(*trace.prefix_shared_fraction * static_cast<double>(workload.input_tokens)));
    workload.cached_prompt_tokens = std::clamp(cached, 0, workload.input_tokens - 1);
    if (workload.cached_prompt_tokens > 0) trace.used_for.push_back("cached_prompt_tokens");
  }
}

}  // namespace brisk::plan
