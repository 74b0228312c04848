#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/request_trace.h"
#include "plan/queueing_model.h"

namespace brisk::plan {

// How one length (prompt or output tokens) spreads over a trace's requests.
struct LengthStats {
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// What `brisk plan --workload TRACE` learns from a request trace (docs/trace.md, "plan").
struct TraceSummary {
  std::string file;
  TraceFormat format = TraceFormat::brisk;
  int requests = 0;
  double span_s = 0;  // first arrival to last
  // nullopt when every request arrives at once (a span of 0): no rate, a burst.
  std::optional<double> rate_per_s;
  LengthStats input_tokens;
  LengthStats output_tokens;
  // nullopt when the trace has no block hashes (Azure's CSV): the sharing is unknown.
  std::optional<double> prefix_shared_fraction;
  // The planner's inputs the trace set (apply_trace_summary): "input_tokens", "output_tokens",
  // "rate", "burst", "cached_prompt_tokens". A flag given on the command line wins over the trace.
  std::vector<std::string> used_for;
};

// Requests per second of an open loop that sends the trace's requests over its span: N arrivals
// bound N - 1 gaps, so two requests a second apart are 1 request/s, not 2. nullopt with fewer
// than two requests or when all arrive at once.
std::optional<double> arrival_rate_per_s(const std::vector<TraceRecord>& records);

// Mean, p50, p90, p99 (linear between ranks, as brisk bench reports) and max; zeros when empty.
LengthStats length_stats(std::vector<double> values);

// The summary of a trace read from `file`.
TraceSummary summarize_trace(const Trace& trace, const std::string& file);

// Reads `file` (TraceFormat::automatic: any format read_trace_file tells apart) and summarizes
// it; nullopt with `error` naming the file and line.
std::optional<TraceSummary> read_trace_summary(const std::string& file, TraceFormat format,
                                               std::string* error);

// Which planner inputs the command line set itself, so the trace does not override them.
struct GivenFlags {
  bool input_tokens = false;
  bool output_tokens = false;
  bool load = false;  // --rate, --concurrency or --burst
};

// Fills `workload` from `trace` for what the flags left open (mean lengths; the arrival rate as
// Poisson arrivals, or a burst of every request when they arrive at once) and sets its
// cached_prompt_tokens from the sharing fraction; records each in trace.used_for.
void apply_trace_summary(TraceSummary& trace, const GivenFlags& given, Workload& workload);

}  // namespace brisk::plan
