#include "doctor/probe_lengths.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/percentile.h"

namespace brisk::doctor {

namespace {

// The bounds of --short-input-tokens and --long-input-tokens (app/doctor_command.cpp).
constexpr int kShortInputTokensMin = 4;
constexpr int kShortInputTokensMax = 100000;
constexpr int kLongInputTokensMin = 16;
constexpr int kLongInputTokensMax = 1000000;
constexpr double kLongInputPercentile = 90;

int rounded_percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return static_cast<int>(std::lround(percentile_linear(values, q)));
}

}  // namespace

ProbeLengths probe_lengths_from_trace(const Trace& trace, const std::string& path) {
  std::vector<double> inputs, outputs;
  for (const TraceRecord& record : trace.records) {
    inputs.push_back(record.input_tokens);
    outputs.push_back(record.output_tokens);
  }
  ProbeLengths workload;
  workload.trace_path = path;
  workload.trace_format = trace_format_name(trace.format);
  workload.trace_requests = trace.records.size();
  if (inputs.empty()) return workload;
  workload.short_input_tokens =
      std::clamp(rounded_percentile(inputs, 50), kShortInputTokensMin, kShortInputTokensMax);
  workload.long_input_tokens = std::clamp(rounded_percentile(inputs, kLongInputPercentile),
                                          kLongInputTokensMin, kLongInputTokensMax);
  // An answer of 0 tokens (a request cancelled before its first) cannot be asked for.
  const int output_tokens = std::max(1, rounded_percentile(outputs, 50));
  workload.short_output_tokens = output_tokens;
  workload.long_output_tokens = output_tokens;
  workload.mixed_short_output_tokens = output_tokens;
  workload.trace_prefix_sharing = prefix_sharing_ratio(trace.records);
  if (workload.trace_prefix_sharing) {
    workload.shared_prefix_fraction = *workload.trace_prefix_sharing;
  }
  return workload;
}

std::string describe_probe_lengths(const ProbeLengths& w) {
  const std::string lengths = fmt::format(
      "short prompts {} tokens in, {} out; long prompts {} in, {} out; among long prompts, "
      "short ones {} out; repeated prefix {:.0f}% of each prompt",
      w.short_input_tokens, w.short_output_tokens, w.long_input_tokens, w.long_output_tokens,
      w.mixed_short_output_tokens, w.shared_prefix_fraction * 100);
  if (!w.from_trace()) return "synthetic prompts: " + lengths;
  std::string origin = fmt::format(
      "from the {} trace {} ({} requests: input p50 and p90, output p50, {})", w.trace_format,
      w.trace_path, w.trace_requests,
      w.trace_prefix_sharing ? "the share of prompt tokens in blocks an earlier request had"
                             : "no block hashes, so the default shared prefix");
  if (!w.flags_over_trace.empty()) {
    origin += fmt::format("; {} given explicitly", fmt::join(w.flags_over_trace, ", "));
  }
  return lengths + ", " + origin;
}

}  // namespace brisk::doctor
