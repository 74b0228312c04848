#include "quant/gates.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <sstream>

namespace brisk::quant {
namespace {

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

std::string known_metrics() {
  std::string names;
  for (const std::string& name : gate_metric_names())
    names.append(names.empty() ? "" : ", ").append(name);
  return names;
}

}  // namespace

std::string Gate::text() const {
  return fmt::format("{}{}{}", metric, at_most ? "<=" : ">=", threshold);
}

const std::vector<std::string>& gate_metric_names() {
  static const std::vector<std::string> names = {"kld_mean", "kld_median", "kld_p99",
                                                 "same_top", "ppl_ratio",  "task_drop",
                                                 "format",   "error_rate"};
  return names;
}

std::optional<std::vector<Gate>> parse_gates(const std::string& text, std::string* error) {
  std::vector<Gate> gates;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    const size_t le = part.find("<=");
    const size_t ge = part.find(">=");
    if ((le == std::string::npos) == (ge == std::string::npos)) {
      *error = "gate '" + part + "' must be METRIC<=VALUE or METRIC>=VALUE, e.g. kld_mean<=0.05";
      return std::nullopt;
    }
    Gate gate;
    gate.at_most = le != std::string::npos;
    const size_t at = gate.at_most ? le : ge;
    gate.metric = trim(part.substr(0, at));
    const std::string value = trim(part.substr(at + 2));
    const auto& names = gate_metric_names();
    if (std::find(names.begin(), names.end(), gate.metric) == names.end()) {
      *error = "gate '" + part + "': unknown metric '" + gate.metric +
               "' (known: " + known_metrics() + ")";
      return std::nullopt;
    }
    const auto [end, failure] =
        std::from_chars(value.data(), value.data() + value.size(), gate.threshold);
    if (value.empty() || failure != std::errc() || end != value.data() + value.size()) {
      *error = "gate '" + part + "': '" + value + "' is not a number";
      return std::nullopt;
    }
    for (const Gate& earlier : gates) {
      if (earlier.metric == gate.metric && earlier.at_most == gate.at_most) {
        *error = "gate '" + part + "' repeats a bound on " + gate.metric + "; give it once";
        return std::nullopt;
      }
    }
    gates.push_back(gate);
  }
  if (gates.empty()) {
    *error = "--gate is empty; give e.g. " + std::string(kDefaultGates);
    return std::nullopt;
  }
  return gates;
}

std::vector<GateOutcome> apply_gates(const std::vector<Gate>& gates,
                                     const std::map<std::string, std::optional<double>>& figures) {
  std::vector<GateOutcome> outcomes;
  for (const Gate& gate : gates) {
    GateOutcome outcome{gate, std::nullopt, false};
    const auto found = figures.find(gate.metric);
    if (found != figures.end() && found->second) {
      outcome.value = *found->second;
      outcome.passed =
          gate.at_most ? *outcome.value <= gate.threshold : *outcome.value >= gate.threshold;
    }
    outcomes.push_back(outcome);
  }
  return outcomes;
}

}  // namespace brisk::quant
