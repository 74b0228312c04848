#include "quant/quant_report.h"

#include <fmt/format.h>

#include <fstream>

#include "quant/quant_html.h"

namespace brisk::quant {
namespace {

using nlohmann::json;

json optional_number(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

// An endpoint's load time cannot be seen over HTTP.
json speed_json(const ModelRun& run) {
  const SpeedFigures& speed = run.speed;
  return {{"load_ms", run.is_endpoint() ? json(nullptr) : json(speed.load_ms)},
          {"ttft_ms_mean", speed.ttft_ms_mean},
          {"e2e_ms_mean", speed.e2e_ms_mean},
          {"decode_tokens_per_s", speed.decode_tokens_per_s},
          {"concurrency", speed.concurrency},
          {"decode_tokens_per_s_concurrent", speed.decode_tokens_per_s_concurrent},
          {"requests", speed.requests},
          {"errors", speed.errors},
          {"error_rate", speed.error_rate}};
}

// Null for an endpoint: memory and file size are not measurable over HTTP.
json memory_json(const ModelRun& run) {
  if (run.is_endpoint()) return nullptr;
  const MemoryFigures& memory = run.memory;
  return {{"file_bytes", memory.file_bytes},
          {"weights_bytes", memory.weights_bytes},
          {"context_tokens", memory.context_tokens},
          {"kv_bytes", memory.kv_bytes},
          {"compute_bytes", memory.compute_bytes},
          {"allocated_bytes", memory.allocated_bytes},
          {"rss_bytes", memory.rss_bytes}};
}

json answers_json(const ModelRun& run) {
  json answers = json::array();
  for (const ItemAnswer& answer : run.answers) {
    answers.push_back({{"text", answer.text}, {"passed", answer.passed}});
  }
  return answers;
}

json tally_json(const KindTally& tally) {
  return {{"checks", tally.checks},
          {"reference_passed", tally.reference_passed},
          {"candidate_passed", tally.candidate_passed},
          {"lost", tally.lost},
          {"gained", tally.gained}};
}

json tasks_json(const TaskComparison& tasks) {
  json by_kind = json::object();
  for (const auto& [kind, tally] : tasks.by_kind)
    by_kind[check_kind_name(kind)] = tally_json(tally);
  return {{"checks", tasks.total.checks},
          {"reference_pass_rate", tasks.reference_pass_rate},
          {"candidate_pass_rate", tasks.candidate_pass_rate},
          {"task_drop", tasks.task_drop},
          {"format_kept", optional_number(tasks.format_kept)},
          {"by_kind", by_kind}};
}

json flips_json(const TaskComparison& tasks) {
  json items = json::array();
  for (const Flip& flip : tasks.flips) {
    items.push_back({{"item", flip.item_id},
                     {"check", check_kind_name(flip.kind)},
                     {"direction", flip.lost ? "lost" : "gained"}});
  }
  return {{"lost", tasks.total.lost}, {"gained", tasks.total.gained}, {"items", items}};
}

json url_of(const ModelRun& run) { return run.is_endpoint() ? json(run.url) : json(nullptr); }

json kld_json(const CandidateResult& candidate, const QuantReport& report) {
  const DivergenceSummary& divergence = candidate.divergence;
  json kld = {{"mean", divergence.kld_mean},
              {"median", divergence.kld_median},
              {"p99", divergence.kld_p99},
              {"max", divergence.kld_max},
              {"tokens", divergence.tokens},
              {"method", candidate.run.is_endpoint() ? "top_logprobs" : "full_vocabulary"}};
  if (candidate.run.is_endpoint()) {
    kld["approximate"] = true;
    kld["top_n"] = report.top_n;
    kld["positions_compared"] = divergence.tokens;
  }
  return kld;
}

json continuations_json(const CandidateResult& candidate) {
  json continuations = json::array();
  for (const ItemAlignment& item : candidate.alignments) {
    const auto& diverged_at = item.alignment.diverged_at;
    continuations.push_back({{"item", item.item_id},
                             {"positions_compared", item.alignment.compared_positions},
                             {"diverged_at", diverged_at ? json(*diverged_at) : json(nullptr)}});
  }
  return continuations;
}

json candidate_json(const CandidateResult& candidate, const QuantReport& report) {
  const DivergenceSummary& divergence = candidate.divergence;
  const bool endpoint = candidate.run.is_endpoint();
  json gates = json::array();
  for (const GateOutcome& outcome : candidate.gates) {
    gates.push_back({{"gate", outcome.gate.text()},
                     {"metric", outcome.gate.metric},
                     {"value", optional_number(outcome.value)},
                     {"measured", outcome.measured()},
                     {"passed", outcome.passed}});
  }
  json result = {{"name", candidate.run.name},
                 {"file", candidate.run.file},
                 {"url", url_of(candidate.run)},
                 {"description", candidate.run.description},
                 {"made_as", candidate.made_as.empty() ? json(nullptr) : json(candidate.made_as)},
                 {"passed", candidate.passed},
                 {"failed_gates", candidate.failed_gates},
                 {"unmeasured_gates", candidate.unmeasured_gates},
                 {"gates", gates},
                 {"kld", kld_json(candidate, report)},
                 {"same_top", divergence.same_top},
                 // Perplexity needs the candidate's probability of the reference's tokens, which an
                 // endpoint gives only where both answers agree.
                 {"ppl_ratio", endpoint ? json(nullptr) : json(divergence.ppl_ratio)},
                 {"ppl", endpoint ? json(nullptr)
                                  : json({{"reference", divergence.reference_ppl},
                                          {"candidate", divergence.candidate_ppl}})},
                 {"tasks", tasks_json(candidate.tasks)},
                 {"flips", flips_json(candidate.tasks)},
                 {"speed", speed_json(candidate.run)},
                 {"memory", memory_json(candidate.run)},
                 {"answers", answers_json(candidate.run)}};
  if (endpoint) {
    result["model"] = candidate.run.model;
    result["continuations"] = continuations_json(candidate);
  }
  return result;
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f}", bytes / 1048576.0); }

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

std::string gate_cell(const GateOutcome& outcome) {
  if (!outcome.measured()) return fmt::format("NOT MEASURED {}", outcome.gate.text());
  return fmt::format("{} {} ({:.4g})", outcome.passed ? "pass" : "FAIL", outcome.gate.text(),
                     *outcome.value);
}

// "pass", or what kept the candidate from passing: "FAIL kld_mean unmeasured:format".
std::string gates_summary(const CandidateResult& candidate) {
  if (candidate.passed) return "pass";
  std::string text = "FAIL";
  for (const std::string& gate : candidate.failed_gates) text += " " + gate;
  for (const std::string& gate : candidate.unmeasured_gates) text += " unmeasured:" + gate;
  return text;
}

}  // namespace

json report_json(const QuantReport& report) {
  json gates = json::object();
  for (const Gate& gate : report.gates) {
    gates[gate.metric] = {{"op", gate.at_most ? "<=" : ">="}, {"threshold", gate.threshold}};
  }
  json candidates = json::array();
  for (const CandidateResult& candidate : report.candidates) {
    candidates.push_back(candidate_json(candidate, report));
  }
  const QuantSettings& settings = report.settings;
  json reference = {{"name", report.reference.name},
                    {"file", report.reference.file},
                    {"url", url_of(report.reference)},
                    {"description", report.reference.description},
                    {"type", report.reference_type},
                    {"quantized", report.reference_quantized},
                    {"speed", speed_json(report.reference)},
                    {"memory", memory_json(report.reference)},
                    {"answers", answers_json(report.reference)}};
  if (report.reference.is_endpoint()) reference["model"] = report.reference.model;
  return {
      {"report", "brisk quant"},
      {"version", 1},
      {"mode", report.mode},
      {"reference", reference},
      {"settings",
       {{"ctx_size", settings.ctx_size},
        {"max_tokens", settings.max_tokens},
        {"concurrency", settings.concurrency},
        {"threads", settings.threads},
        {"prefer", settings.prefer},
        {"dataset", settings.dataset},
        {"divergence_source", report.mode == "endpoints"         ? "endpoint top_logprobs"
                              : settings.divergence_text.empty() ? "dataset continuations"
                                                                 : settings.divergence_text},
        {"text_ctx", settings.text_ctx}}},
      {"gates", gates},
      {"candidates", candidates},
      {"verdict",
       {{"choice", report.verdict.choice ? json(report.candidates[*report.verdict.choice].run.name)
                                         : json(nullptr)},
        {"summary", report.verdict.summary}}},
      {"notes", report.notes}};
}

void print_report_table(std::ostream& out, const QuantReport& report) {
  const bool endpoints = report.mode == "endpoints";
  if (endpoints) {
    out << fmt::format(
        "endpoints: kld is APPROXIMATE (~), from the servers' top {} logprobs up to where the "
        "answers part; memory and load time are not measurable over HTTP\n",
        report.top_n);
  }
  out << fmt::format("{:<24} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7} {:>9} {:>9} {:>8} {:>9}  {}\n",
                     "model", endpoints ? "~kld_mean" : "kld_mean",
                     endpoints ? "~kld_p99" : "kld_p99", "same_top", "ppl_x", "tasks", "flips",
                     "ttft_ms", "decode/s", "load_ms", "mem_MiB", "gates");
  auto load_ms = [](const ModelRun& run) {
    return run.is_endpoint() ? std::string("-") : fmt::format("{:.0f}", run.speed.load_ms);
  };
  auto memory_mib = [](const ModelRun& run) {
    return run.is_endpoint() ? std::string("-") : mib(run.memory.allocated_bytes);
  };
  const ModelRun& reference = report.reference;
  out << fmt::format(
      "{:<24} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7} {:>9.1f} {:>9.1f} {:>8} {:>9}  {}\n",
      reference.name.substr(0, 24), "-", "-", "-", "-",
      report.candidates.empty() ? std::string("-")
                                : percent(report.candidates.front().tasks.reference_pass_rate),
      "-", reference.speed.ttft_ms_mean, reference.speed.decode_tokens_per_s, load_ms(reference),
      memory_mib(reference), "(reference)");
  for (const CandidateResult& candidate : report.candidates) {
    const DivergenceSummary& divergence = candidate.divergence;
    out << fmt::format(
        "{:<24} {:>9.5f} {:>9.4f} {:>9} {:>8} {:>9} {:>7} {:>9.1f} {:>9.1f} {:>8} {:>9}  "
        "{}\n",
        candidate.run.name.substr(0, 24), divergence.kld_mean, divergence.kld_p99,
        percent(divergence.same_top),
        candidate.run.is_endpoint() ? std::string("-")
                                    : fmt::format("{:.4f}", divergence.ppl_ratio),
        percent(candidate.tasks.candidate_pass_rate),
        fmt::format("-{}/+{}", candidate.tasks.total.lost, candidate.tasks.total.gained),
        candidate.run.speed.ttft_ms_mean, candidate.run.speed.decode_tokens_per_s,
        load_ms(candidate.run), memory_mib(candidate.run), gates_summary(candidate));
  }
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
  out << "verdict: " << report.verdict.summary << "\n";
}

std::string report_markdown(const QuantReport& report) {
  const bool endpoints = report.mode == "endpoints";
  std::string md = "# brisk quant report\n\n";
  if (endpoints) {
    md += fmt::format("Reference: {} (endpoint; memory and file size not measurable over HTTP)\n\n",
                      report.reference.description);
  } else {
    md += fmt::format("Reference: `{}` ({}, {} MiB file)\n\n", report.reference.file,
                      report.reference.description, mib(report.reference.memory.file_bytes));
  }
  md += "**Verdict:** " + report.verdict.summary + "\n\n";
  for (const std::string& note : report.notes) md += "- " + note + "\n";
  md += "\n## Quality against the reference\n\n";
  if (endpoints) {
    md += fmt::format(
        "KLD is **approximate**: from the servers' top {} logprobs, over the positions where "
        "both answers were conditioned on the same tokens (see docs/quant.md).\n\n",
        report.top_n);
  }
  md += fmt::format(
      "| candidate | {0} mean | {0} median | {0} p99 | same top | PPL ratio | task pass | "
      "task drop | format kept | flips lost/gained | gates |\n",
      endpoints ? "~KLD" : "KLD");
  md += "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CandidateResult& candidate : report.candidates) {
    const DivergenceSummary& divergence = candidate.divergence;
    std::string gates;
    for (const GateOutcome& outcome : candidate.gates) {
      gates.append(gates.empty() ? "" : "<br>").append(gate_cell(outcome));
    }
    md +=
        fmt::format("| {} | {:.5f} | {:.5f} | {:.5f} | {} | {} | {} | {:.3f} | {} | {}/{} | {} |\n",
                    candidate.run.name, divergence.kld_mean, divergence.kld_median,
                    divergence.kld_p99, percent(divergence.same_top),
                    candidate.run.is_endpoint() ? std::string("n/a")
                                                : fmt::format("{:.4f}", divergence.ppl_ratio),
                    percent(candidate.tasks.candidate_pass_rate), candidate.tasks.task_drop,
                    candidate.tasks.format_kept ? percent(*candidate.tasks.format_kept) : "n/a",
                    candidate.tasks.total.lost, candidate.tasks.total.gained, gates);
  }
  md += "\n## Speed and memory (same settings for every model)\n\n";
  if (endpoints) {
    md += fmt::format(
        "Measured over HTTP with brisk bench's client: up to {} new tokens per item, concurrency "
        "{} for the second decode figure.\n\n",
        report.settings.max_tokens, report.settings.concurrency);
  } else {
    md += fmt::format(
        "Context {} tokens, up to {} new tokens per item, concurrency {} for the "
        "second decode figure.\n\n",
        report.settings.ctx_size, report.settings.max_tokens, report.settings.concurrency);
  }
  md +=
      "| model | file MiB | allocated MiB (weights + KV + compute) | RSS added MiB | load ms | "
      "TTFT ms | E2E ms | decode tok/s (1) | decode tok/s (N) | errors |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  auto speed_row = [&md](const ModelRun& run) {
    if (run.is_endpoint()) {
      md += fmt::format(
          "| {} | n/a | n/a | n/a | n/a | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {}/{} |\n", run.name,
          run.speed.ttft_ms_mean, run.speed.e2e_ms_mean, run.speed.decode_tokens_per_s,
          run.speed.decode_tokens_per_s_concurrent, run.speed.errors, run.speed.requests);
      return;
    }
    md += fmt::format(
        "| {} | {} | {} ({} + {} + {}) | {} | {:.0f} | {:.1f} | {:.1f} | {:.1f} | "
        "{:.1f} | {}/{} |\n",
        run.name, mib(run.memory.file_bytes), mib(run.memory.allocated_bytes),
        mib(run.memory.weights_bytes), mib(run.memory.kv_bytes), mib(run.memory.compute_bytes),
        mib(run.memory.rss_bytes), run.speed.load_ms, run.speed.ttft_ms_mean, run.speed.e2e_ms_mean,
        run.speed.decode_tokens_per_s, run.speed.decode_tokens_per_s_concurrent, run.speed.errors,
        run.speed.requests);
  };
  speed_row(report.reference);
  for (const CandidateResult& candidate : report.candidates) speed_row(candidate.run);
  md += "\n## Flips (the answers behind them)\n\n";
  for (const CandidateResult& candidate : report.candidates) {
    if (candidate.tasks.flips.empty()) continue;
    md += "### " + candidate.run.name + "\n\n";
    for (const Flip& flip : candidate.tasks.flips) {
      md += fmt::format(
          "- `{}` ({}): {}\n", flip.item_id, check_kind_name(flip.kind),
          flip.lost ? "reference right, candidate wrong" : "reference wrong, candidate right");
    }
    md += "\n";
  }
  return md;
}

bool write_report_files(const QuantReport& report, const std::filesystem::path& dir,
                        std::string* error) {
  std::error_code failure;
  std::filesystem::create_directories(dir, failure);
  if (failure) {
    *error = "cannot create --out '" + dir.string() + "': " + failure.message();
    return false;
  }
  std::ofstream(dir / "report.json") << report_json(report).dump(2) << "\n";
  std::ofstream(dir / "report.md") << report_markdown(report);
  return write_quant_html(report, dir / "report.html", error);
}

}  // namespace brisk::quant
