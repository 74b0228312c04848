#include "doctor/verdict.h"

#include <algorithm>

#include <fmt/format.h>

#include "doctor/rules.h"

namespace brisk::doctor {

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::info: return "info";
    case Severity::warning: return "warning";
    case Severity::critical: return "critical";
  }
  return "info";
}

namespace {

// Findings whose impact differs by less than this are ranked by cause order instead: impact is
// an estimate, and a cause should outrank the symptom it produces.
constexpr double kImpactTie = 0.15;

std::string summary_for(const Finding& primary, bool accelerator_bound) {
  if (accelerator_bound) {
    return "Yes: the accelerator is the limit. " + primary.summary + ". " + primary.prescription +
           ".";
  }
  return "No, more accelerator is not the fix: " + primary.summary + ". Fix: " +
         primary.prescription + ".";
}

}  // namespace

Diagnosis diagnose(const Evidence& evidence) {
  Diagnosis diagnosis;
  std::vector<std::pair<size_t, Finding>> found;
  const auto& rules = all_rules();
  for (size_t order = 0; order < rules.size(); ++order) {
    if (auto finding = rules[order].check(evidence)) found.emplace_back(order, std::move(*finding));
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    if (a.second.severity != b.second.severity) return a.second.severity > b.second.severity;
    if (std::abs(a.second.impact - b.second.impact) >= kImpactTie) {
      return a.second.impact > b.second.impact;
    }
    return a.first < b.first;
  });
  for (auto& [order, finding] : found) diagnosis.findings.push_back(std::move(finding));

  Verdict& verdict = diagnosis.verdict;
  const auto problem = std::find_if(diagnosis.findings.begin(), diagnosis.findings.end(),
                                    [](const Finding& f) { return f.severity != Severity::info; });
  const auto saturated =
      std::find_if(diagnosis.findings.begin(), diagnosis.findings.end(),
                   [](const Finding& f) { return f.id == "compute_saturated"; });
  if (problem != diagnosis.findings.end()) {
    verdict.primary_cause = problem->id;
    verdict.accelerator_bound = problem->id == "compute_saturated";
    verdict.summary = summary_for(*problem, verdict.accelerator_bound);
    return diagnosis;
  }
  verdict.primary_cause = "healthy";
  verdict.accelerator_bound = saturated != diagnosis.findings.end();
  verdict.summary =
      verdict.accelerator_bound
          ? "Healthy, and the accelerator is the limit: " + saturated->summary +
                ". No configuration problem found; more accelerator is the fix for more "
                "throughput."
          : "Healthy: no bottleneck found within the probe's load (no finding passed its "
            "threshold).";
  return diagnosis;
}

}  // namespace brisk::doctor
