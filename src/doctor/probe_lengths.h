#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/request_trace.h"

namespace brisk::doctor {

// The prompt and answer lengths the probe sends, in the server's tokens, and where they came
// from: doctor's defaults (small enough for a 60 s budget on a 2-core CPU and a 270M model) and
// its flags, or a request trace of the service's own traffic (--workload).
struct ProbeLengths {
  int short_input_tokens = 32;
  int short_output_tokens = 16;
  int long_input_tokens = 320;
  int long_output_tokens = 8;
  int mixed_short_output_tokens = 32;
  // Of each repeated-prefix prompt, the part every request shares; 0 skips that probe (a
  // workload that shares nothing has nothing to gain from a prefix cache).
  double shared_prefix_fraction = 0.85;

  // With --workload: the trace, as read.
  std::string trace_path;  // empty: the synthetic defaults
  std::string trace_format;
  size_t trace_requests = 0;
  std::optional<double> trace_prefix_sharing;  // nullopt: the trace has no block hashes
  std::vector<std::string> flags_over_trace;   // length flags given explicitly, which win

  bool from_trace() const { return !trace_path.empty(); }
};

// The probe's lengths from a trace's requests: short prompts of its median input length, long
// ones of its 90th percentile (the long tail a user notices, without the one outlier a p99 of a
// short trace is), every answer of its median output length, and prompts in the repeated-prefix
// probe sharing the fraction of prompt tokens the trace's requests share with earlier ones
// (prefix_sharing_ratio; the default where the trace has no block hashes, as Azure's CSV).
// Lengths are kept within the ranges of the matching flags.
ProbeLengths probe_lengths_from_trace(const Trace& trace, const std::string& path);

// One line for the reports: the lengths used and, with a trace, the file, its format and size.
std::string describe_probe_lengths(const ProbeLengths& workload);

}  // namespace brisk::doctor
