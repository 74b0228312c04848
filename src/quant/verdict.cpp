#include "quant/verdict.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>

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

std::map<std::string, std::optional<double>> gate_figures(const CandidateResult& candidate,
                                                          bool perplexity_measured) {
  const DivergenceSummary& divergence = candidate.divergence;
  const bool measured = divergence.tokens > 0;
  auto if_measured = [](bool measured, double value) {
    return measured ? std::optional<double>(value) : std::nullopt;
  };
  std::map<std::string, std::optional<double>> figures = {
      {"kld_mean", if_measured(measured, divergence.kld_mean)},
      {"kld_median", if_measured(measured, divergence.kld_median)},
      {"kld_p99", if_measured(measured, divergence.kld_p99)},
      {"same_top", if_measured(measured, divergence.same_top)},
      {"ppl_ratio", if_measured(measured && perplexity_measured, divergence.ppl_ratio)},
      {"format", candidate.tasks.format_kept},
      {"error_rate", candidate.run.speed.error_rate}};
  if (candidate.tasks.total.checks > 0) figures["task_drop"] = candidate.tasks.task_drop;
  return figures;
}

std::string failures_of(const CandidateResult& candidate) {
  std::string text = candidate.run.name;
  if (!candidate.failed_gates.empty()) text += " failed " + join(candidate.failed_gates);
  if (!candidate.unmeasured_gates.empty()) {
    text += std::string(candidate.failed_gates.empty() ? "" : ";") + " could not be judged on " +
            join(candidate.unmeasured_gates) + " (not measured)";
  }
  return text;
}

}  // namespace

void judge_candidate(const std::vector<Gate>& gates, bool perplexity_measured,
                     CandidateResult* candidate) {
  candidate->gates = apply_gates(gates, gate_figures(*candidate, perplexity_measured));
  candidate->failed_gates.clear();
  candidate->unmeasured_gates.clear();
  for (const GateOutcome& outcome : candidate->gates) {
    if (outcome.passed) continue;
    (outcome.measured() ? candidate->failed_gates : candidate->unmeasured_gates)
        .push_back(outcome.gate.metric);
  }
  candidate->passed = candidate->failed_gates.empty() && candidate->unmeasured_gates.empty();
}

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
      failures.push_back(failures_of(candidate));
    }
    verdict.summary = "keep the reference: no candidate passes every gate (" + join(failures) + ")";
    return verdict;
  }
  const CandidateResult& chosen = candidates[*verdict.choice];
  const double speedup =
      ratio(chosen.run.speed.decode_tokens_per_s, reference.speed.decode_tokens_per_s);
  verdict.summary = fmt::format(
      "ship {}: passes every gate; {}, decode {:.2f}x the reference's speed", chosen.run.name,
      prefer_memory ? "the smallest that does" : "the fastest that does", speedup);
  if (reference.is_endpoint()) {
    verdict.summary += " (memory and file size are not measurable over HTTP)";
  } else {
    const double memory_saving = 1.0 - ratio(static_cast<double>(chosen.run.memory.allocated_bytes),
                                             static_cast<double>(reference.memory.allocated_bytes));
    const double file_saving = 1.0 - ratio(static_cast<double>(chosen.run.memory.file_bytes),
                                           static_cast<double>(reference.memory.file_bytes));
    verdict.summary +=
        fmt::format(", {} memory at this context, a {} file", change(memory_saving, "less", "more"),
                    change(file_saving, "smaller", "larger"));
  }
  if (speedup < 1.0) {
    verdict.summary +=
        " (slower than the reference here: quantization is faster only where the kernels for "
        "its type are)";
  }
  return verdict;
}

}  // namespace brisk::quant
