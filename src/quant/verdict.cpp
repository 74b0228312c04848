#include "quant/verdict.h"

#include <fmt/format.h>

#include <cmath>

namespace brisk::quant {
namespace {

double ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0.0;
}

bool better(const CandidateResult& a, const CandidateResult& b, bool prefer_memory) {
  if (prefer_memory) {
    if (a.run.memory.allocated_bytes != b.run.memory.allocated_bytes) {
      return a.run.memory.allocated_bytes < b.run.memory.allocated_bytes;
    }
    return a.run.memory.file_bytes < b.run.memory.file_bytes;
  }
  return a.run.speed.decode_tokens_per_s > b.run.speed.decode_tokens_per_s;
}

// A saving as "40% less", a growth as "15% more".
std::string change(double saving, const char* less, const char* more) {
  return fmt::format("{:.0f}% {}", 100.0 * std::abs(saving), saving >= 0 ? less : more);
}

std::string join(const std::vector<std::string>& parts) {
  std::string joined;
  for (const std::string& part : parts) joined.append(joined.empty() ? "" : ", ").append(part);
  return joined;
}

}  // namespace

Verdict choose_candidate(const ModelRun& reference, const std::vector<CandidateResult>& candidates,
                         const std::string& prefer) {
  const bool prefer_memory = prefer == "memory";
  Verdict verdict;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].passed) continue;
    if (!verdict.choice || better(candidates[i], candidates[*verdict.choice], prefer_memory)) {
      verdict.choice = i;
    }
  }
  if (!verdict.choice) {
    std::vector<std::string> failures;
    for (const CandidateResult& candidate : candidates) {
      failures.push_back(candidate.run.name + " failed " + join(candidate.failed_gates));
    }
    verdict.summary = "keep the reference: no candidate passes every gate (" + join(failures) + ")";
    return verdict;
  }
  const CandidateResult& chosen = candidates[*verdict.choice];
  const double speedup =
      ratio(chosen.run.speed.decode_tokens_per_s, reference.speed.decode_tokens_per_s);
  const double memory_saving = 1.0 - ratio(static_cast<double>(chosen.run.memory.allocated_bytes),
                                           static_cast<double>(reference.memory.allocated_bytes));
  const double file_saving = 1.0 - ratio(static_cast<double>(chosen.run.memory.file_bytes),
                                         static_cast<double>(reference.memory.file_bytes));
  verdict.summary = fmt::format(
      "ship {}: passes every gate; {}, decode {:.2f}x the reference's speed, {} memory "
      "at this context, a {} file",
      chosen.run.name, prefer_memory ? "the smallest that does" : "the fastest that does", speedup,
      change(memory_saving, "less", "more"), change(file_saving, "smaller", "larger"));
  if (speedup < 1.0) {
    verdict.summary +=
        " (slower than the reference here: quantization is faster only where the kernels for "
        "its type are)";
  }
  return verdict;
}

}  // namespace brisk::quant
