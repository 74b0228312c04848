#pragma once

#include <optional>
#include <string>
#include <vector>

namespace brisk::doctor {

enum class Severity { info, warning, critical };
const char* severity_name(Severity severity);

// One number behind a finding, with where it came from ("probe ramp c=4, client", "/metrics
// brisk_kv_cache_usage_ratio", "/proc/stat", "NVML", "brisk plan floor").
struct EvidenceItem {
  std::string name;
  double value = 0;
  std::string unit;
  std::string source;
};

// What brisk plan's calibrated simulation predicts a finding's serve_flags change, at the load
// the probe measured (doctor/what_if.h).
struct PredictedEffect {
  std::string metric;  // in words: "p99 TTFT", "short streams' longest token gap"
  std::string unit = "ms";
  double before = 0;  // predicted for the configuration the evidence shows
  double after = 0;   // predicted with serve_flags
  double measured = -1;  // what the probe measured where `before` stands for it; -1: nothing
  std::string load;      // "8 concurrent, 32-token prompts, 16-token answers"
  std::string origin;    // "brisk plan, cpu-2vcpu, calibrated on ..."
  // after / before − 1: −0.6 is "−60%".
  double change() const { return before > 0 ? after / before - 1 : 0; }
};

struct Finding {
  std::string id;
  Severity severity = Severity::warning;
  std::string summary;  // one sentence: what is wrong, in numbers
  std::vector<EvidenceItem> evidence;
  std::string prescription;  // what to change; names brisk serve's flag where that is the fix
  // Share of the affected requests' latency (or of lost throughput) the problem accounts for,
  // in [0, 1]: ranks findings of equal severity.
  double impact = 0;
  // The prescription as brisk serve flags with their values ({"--max-seqs", "16"}), where it is
  // one: `brisk tune --verify report.json` measures each against the current configuration.
  std::vector<std::string> serve_flags;
  // The prescription's predicted effect, for findings with serve_flags; otherwise (or where
  // brisk plan cannot predict it) empty, with the reason in predicted_effect_unavailable.
  std::optional<PredictedEffect> predicted_effect = std::nullopt;
  std::string predicted_effect_unavailable = {};
};

}  // namespace brisk::doctor
