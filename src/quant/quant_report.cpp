#include "quant/quant_report.h"

#include <fmt/format.h>

#include <fstream>

#include "quant/quant_html.h"

namespace brisk::quant {
namespace {

using nlohmann::json;

json speed_json(const SpeedFigures& speed) {
  return {{"load_ms", speed.load_ms},
          {"ttft_ms_mean", speed.ttft_ms_mean},
          {"e2e_ms_mean", speed.e2e_ms_mean},
          {"decode_tokens_per_s", speed.decode_tokens_per_s},
          {"concurrency", speed.concurrency},
          {"decode_tokens_per_s_concurrent", speed.decode_tokens_per_s_concurrent},
          {"requests", speed.requests},
          {"errors", speed.errors},
          {"error_rate", speed.error_rate}};
}

json memory_json(const MemoryFigures& memory) {
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

json optional_number(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
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

json candidate_json(const CandidateResult& candidate) {
  const DivergenceSummary& divergence = candidate.divergence;
  json gates = json::array();
  for (const GateOutcome& outcome : candidate.gates) {
    gates.push_back({{"gate", outcome.gate.text()},
                     {"metric", outcome.gate.metric},
                     {"value", optional_number(outcome.value)},
                     {"passed", outcome.passed}});
  }
  return {
      {"name", candidate.run.name},
      {"file", candidate.run.file},
      {"description", candidate.run.description},
      {"made_as", candidate.made_as.empty() ? json(nullptr) : json(candidate.made_as)},
      {"passed", candidate.passed},
      {"failed_gates", candidate.failed_gates},
      {"gates", gates},
      {"kld",
       {{"mean", divergence.kld_mean},
        {"median", divergence.kld_median},
        {"p99", divergence.kld_p99},
        {"max", divergence.kld_max},
        {"tokens", divergence.tokens}}},
      {"same_top", divergence.same_top},
      {"ppl_ratio", divergence.ppl_ratio},
      {"ppl", {{"reference", divergence.reference_ppl}, {"candidate", divergence.candidate_ppl}}},
      {"tasks", tasks_json(candidate.tasks)},
      {"flips", flips_json(candidate.tasks)},
      {"speed", speed_json(candidate.run.speed)},
      {"memory", memory_json(candidate.run.memory)},
      {"answers", answers_json(candidate.run)}};
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f}", bytes / 1048576.0); }

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

std::string gate_cell(const GateOutcome& outcome) {
  const std::string value = outcome.value ? fmt::format("{:.4g}", *outcome.value) : "n/a";
  return fmt::format("{} {} ({})", outcome.passed ? "pass" : "FAIL", outcome.gate.text(), value);
}

}  // namespace

json report_json(const QuantReport& report) {
  json gates = json::object();
  for (const Gate& gate : report.gates) {
    gates[gate.metric] = {{"op", gate.at_most ? "<=" : ">="}, {"threshold", gate.threshold}};
  }
  json candidates = json::array();
  for (const CandidateResult& candidate : report.candidates) {
    candidates.push_back(candidate_json(candidate));
  }
  const QuantSettings& settings = report.settings;
  return {
      {"report", "brisk quant"},
      {"version", 1},
      {"reference",
       {{"name", report.reference.name},
        {"file", report.reference.file},
        {"description", report.reference.description},
        {"type", report.reference_type},
        {"quantized", report.reference_quantized},
        {"speed", speed_json(report.reference.speed)},
        {"memory", memory_json(report.reference.memory)},
        {"answers", answers_json(report.reference)}}},
      {"settings",
       {{"ctx_size", settings.ctx_size},
        {"max_tokens", settings.max_tokens},
        {"concurrency", settings.concurrency},
        {"threads", settings.threads},
        {"prefer", settings.prefer},
        {"dataset", settings.dataset},
        {"divergence_source",
         settings.divergence_text.empty() ? "dataset continuations" : settings.divergence_text},
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
  out << fmt::format("{:<24} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7} {:>9} {:>9} {:>8} {:>9}  {}\n",
                     "model", "kld_mean", "kld_p99", "same_top", "ppl_x", "tasks", "flips",
                     "ttft_ms", "decode/s", "load_ms", "mem_MiB", "gates");
  const ModelRun& reference = report.reference;
  out << fmt::format(
      "{:<24} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7} {:>9.1f} {:>9.1f} {:>8.0f} {:>9}  {}\n",
      reference.name.substr(0, 24), "-", "-", "-", "-",
      report.candidates.empty() ? std::string("-")
                                : percent(report.candidates.front().tasks.reference_pass_rate),
      "-", reference.speed.ttft_ms_mean, reference.speed.decode_tokens_per_s,
      reference.speed.load_ms, mib(reference.memory.allocated_bytes), "(reference)");
  for (const CandidateResult& candidate : report.candidates) {
    const DivergenceSummary& divergence = candidate.divergence;
    std::string failed;
    for (const std::string& gate : candidate.failed_gates) {
      failed.append(failed.empty() ? "" : ",").append(gate);
    }
    out << fmt::format(
        "{:<24} {:>9.5f} {:>9.4f} {:>9} {:>8.4f} {:>9} {:>7} {:>9.1f} {:>9.1f} {:>8.0f} {:>9}  "
        "{}\n",
        candidate.run.name.substr(0, 24), divergence.kld_mean, divergence.kld_p99,
        percent(divergence.same_top), divergence.ppl_ratio,
        percent(candidate.tasks.candidate_pass_rate),
        fmt::format("-{}/+{}", candidate.tasks.total.lost, candidate.tasks.total.gained),
        candidate.run.speed.ttft_ms_mean, candidate.run.speed.decode_tokens_per_s,
        candidate.run.speed.load_ms, mib(candidate.run.memory.allocated_bytes),
        candidate.passed ? "pass" : "FAIL " + failed);
  }
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
  out << "verdict: " << report.verdict.summary << "\n";
}

std::string report_markdown(const QuantReport& report) {
  std::string md = "# brisk quant report\n\n";
  md += fmt::format("Reference: `{}` ({}, {} MiB file)\n\n", report.reference.file,
                    report.reference.description, mib(report.reference.memory.file_bytes));
  md += "**Verdict:** " + report.verdict.summary + "\n\n";
  for (const std::string& note : report.notes) md += "- " + note + "\n";
  md += "\n## Quality against the reference\n\n";
  md +=
      "| candidate | KLD mean | KLD median | KLD p99 | same top | PPL ratio | task pass | "
      "task drop | format kept | flips lost/gained | gates |\n";
  md += "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CandidateResult& candidate : report.candidates) {
    const DivergenceSummary& divergence = candidate.divergence;
    std::string gates;
    for (const GateOutcome& outcome : candidate.gates) {
      gates.append(gates.empty() ? "" : "<br>").append(gate_cell(outcome));
    }
    md += fmt::format(
        "| {} | {:.5f} | {:.5f} | {:.5f} | {} | {:.4f} | {} | {:.3f} | {} | {}/{} | {} |\n",
        candidate.run.name, divergence.kld_mean, divergence.kld_median, divergence.kld_p99,
        percent(divergence.same_top), divergence.ppl_ratio,
        percent(candidate.tasks.candidate_pass_rate), candidate.tasks.task_drop,
        candidate.tasks.format_kept ? percent(*candidate.tasks.format_kept) : "n/a",
        candidate.tasks.total.lost, candidate.tasks.total.gained, gates);
  }
  md += "\n## Speed and memory (same settings for every model)\n\n";
  md += fmt::format(
      "Context {} tokens, up to {} new tokens per item, concurrency {} for the "
      "second decode figure.\n\n",
      report.settings.ctx_size, report.settings.max_tokens, report.settings.concurrency);
  md +=
      "| model | file MiB | allocated MiB (weights + KV + compute) | RSS added MiB | load ms | "
      "TTFT ms | E2E ms | decode tok/s (1) | decode tok/s (N) | errors |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  auto speed_row = [&md](const ModelRun& run) {
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
