#pragma once

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
};

}  // namespace brisk::doctor
