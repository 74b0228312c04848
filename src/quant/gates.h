#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace brisk::quant {

// One pass/fail rule on a candidate's figure, e.g. "kld_mean<=0.05".
struct Gate {
  std::string metric;   // one of gate_metric_names()
  bool at_most = true;  // "<=" (true) or ">=" (false)
  double threshold = 0;
  std::string text() const;  // as the user writes it
};

// The defaults of --gate (docs/quant.md explains each).
constexpr const char* kDefaultGates = "kld_mean<=0.05,same_top>=0.90,task_drop<=0.02,format>=0.98";

// kld_mean, kld_median, kld_p99, same_top, ppl_ratio, task_drop, format, error_rate.
const std::vector<std::string>& gate_metric_names();

// "a<=x,b>=y" -> gates; nullopt with `error` saying what is wrong and what is allowed.
std::optional<std::vector<Gate>> parse_gates(const std::string& text, std::string* error);

// A gate's figure that was not measured (no JSON check the reference passes, no perplexity over
// an endpoint) does not pass: a verdict must not certify what nobody looked at. It is reported
// as "not measured" rather than as a failure of the candidate's quality.
struct GateOutcome {
  Gate gate;
  std::optional<double> value;  // nullopt: not measured
  bool passed = false;
  bool measured() const { return value.has_value(); }
};

// `figures`: metric name -> value, absent or nullopt when not measured.
std::vector<GateOutcome> apply_gates(const std::vector<Gate>& gates,
                                     const std::map<std::string, std::optional<double>>& figures);

}  // namespace brisk::quant
