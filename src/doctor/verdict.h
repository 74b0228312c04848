#pragma once

#include <string>
#include <vector>

#include "doctor/evidence.h"
#include "doctor/finding.h"

namespace brisk::doctor {

// The answer to "is it the accelerator?": the first lines of every report.
struct Verdict {
  bool accelerator_bound = false;  // more (or faster) accelerator is the fix
  std::string primary_cause;       // a finding's id, or "healthy"
  std::string summary;
};

struct Diagnosis {
  Verdict verdict;
  std::vector<Finding> findings;  // ranked: most severe first, then by impact, then by cause
};

// Runs every rule over `evidence` and ranks what they found. With no warning or critical
// finding the primary cause is "healthy" (info findings, such as a device at its limit, stay
// listed).
Diagnosis diagnose(const Evidence& evidence);

}  // namespace brisk::doctor
