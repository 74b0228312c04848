#include "tune/tune_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/duration.h"

namespace brisk::tune {

namespace {

std::string rate_text(double rps) {
  if (std::isinf(rps)) return "every request at once";
  return fmt::format("{:.3g} req/s", rps);
}

// One measurement's goodput: the rate it met, or below the rate it first missed.
std::string measured_text(const Goodput& goodput) {
  if (goodput.rate > 0) return fmt::format("{:.3g}", goodput.rate);
  return std::isfinite(goodput.missed_at) ? "< " + fmt::format("{:.3g}", goodput.missed_at) : "0";
}

// The search's measurement; the re-measurements in fresh servers; their mean with its 95%
// confidence interval (from two measurements up).
std::string search_text(const Candidate& candidate) {
  return candidate.measured() ? measured_text(candidate.measurements.front()) : "-";
}

std::string remeasured_text(const Candidate& candidate) {
  if (candidate.measurements.size() < 2) return "-";
  std::vector<std::string> each;
  for (size_t i = 1; i < candidate.measurements.size(); ++i) {
    each.push_back(measured_text(candidate.measurements[i]));
  }
  return fmt::format("{}", fmt::join(each, ", "));
}

std::string goodput_text(const Candidate& candidate) {
  if (!candidate.measured()) return "-";
  if (candidate.goodput_rps() <= 0) return measured_text(candidate.measurements.front());
  std::string text = fmt::format("{:.3g}", candidate.goodput_rps());
  if (candidate.measurements.size() > 1) {
    text += fmt::format(" ± {:.2g} (n={})", candidate.goodput_ci95_rps(),
                        candidate.measurements.size());
  }
  return text;
}

// Measured candidates best first, then the rest in the order they were considered.
std::vector<size_t> ranking(const SearchResult& search) {
  std::vector<size_t> order(search.candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Candidate& x = search.candidates[a];
    const Candidate& y = search.candidates[b];
    if (x.measured() != y.measured()) return x.measured();
    return x.goodput_rps() > y.goodput_rps();
  });
  return order;
}

nlohmann::json trial_json(const bench::RateTrial& trial) {
  const bench::RunStatistics& stats = trial.stats;
  return {{"rate_rps", std::isinf(trial.rate) ? nlohmann::json("inf") : nlohmann::json(trial.rate)},
          {"meets_slo", trial.meets()},
          {"misses", trial.misses},
          {"ok", stats.ok},
          {"failed", stats.failed},
          {"ttft_p99_ms", stats.ttft_ms.p99},
          {"tpot_p99_ms", stats.tpot_ms.p99},
          {"itl_p99_ms", stats.itl_ms.p99},
          {"e2e_p99_ms", stats.e2e_ms.p99},
          {"request_throughput_rps", stats.request_throughput},
          {"output_tokens_per_s", stats.output_token_throughput},
          {"embeddings_per_s", stats.embedding_throughput},
          {"goodput_rps", stats.goodput},
          {"duration_s", stats.duration_s},
          {"abandoned", stats.abandoned.empty() ? nlohmann::json(nullptr)
                                                : nlohmann::json(stats.abandoned)}};
}

nlohmann::json candidate_json(const TuneReport& report, const Candidate& candidate) {
  nlohmann::json measurements = nlohmann::json::array();
  for (const Goodput& goodput : candidate.measurements) {
    nlohmann::json trials = nlohmann::json::array();
    for (const bench::RateTrial& trial : goodput.trials) trials.push_back(trial_json(trial));
    measurements.push_back(
        {{"goodput_rps", goodput.rate},
         {"missed_at_rps", std::isfinite(goodput.missed_at) ? nlohmann::json(goodput.missed_at)
                                                             : nlohmann::json(nullptr)},
         {"gave_up", goodput.gave_up},
         {"stopped", goodput.stopped},
         {"seconds", goodput.seconds},
         {"trials", std::move(trials)}});
  }
  const Setting& baseline = report.search.candidates.front().setting;
  return {{"setting", candidate.setting},
          {"change", describe_change(report.knobs, baseline, candidate.setting)},
          {"stage", candidate.stage},
          {"predicted_goodput_rps", candidate.predicted_rps ? nlohmann::json(*candidate.predicted_rps)
                                                            : nlohmann::json(nullptr)},
          {"goodput_rps", candidate.goodput_rps()},
          {"goodput_ci95_rps", candidate.goodput_ci95_rps()},
          {"measurements", std::move(measurements)},
          {"command", candidate.command},
          {"peak_memory_bytes", candidate.peak_memory_bytes},
          {"note", candidate.note}};
}

bool embeddings(const TuneReport& report) { return report.endpoint == "embeddings"; }

// The trial of `goodput` nearest above `rate` that met the SLO, if any.
const bench::RateTrial* met_at_or_above(const Candidate& candidate, double rate) {
  const bench::RateTrial* found = nullptr;
  for (const Goodput& goodput : candidate.measurements) {
    for (const bench::RateTrial& trial : goodput.trials) {
      if (trial.meets() && trial.rate >= rate && (!found || trial.rate < found->rate)) {
        found = &trial;
      }
    }
  }
  return found;
}

// The measured candidate of `setting`, if the search measured it.
const Candidate* measured_candidate(const SearchResult& search, const Setting& setting) {
  for (const Candidate& candidate : search.candidates) {
    if (candidate.setting == setting && candidate.measured()) return &candidate;
  }
  return nullptr;
}

constexpr size_t kGridShown = 10;

nlohmann::json grid_json(const TuneReport& report) {
  const SearchResult& search = report.search;
  if (!search.grid) return nullptr;
  const Setting& baseline = search.candidates.front().setting;
  nlohmann::json best = nlohmann::json::array();
  for (size_t i = 0; i < search.grid->ranked.size() && i < kGridShown; ++i) {
    const GridPoint& point = search.grid->ranked[i];
    const Candidate* measured = measured_candidate(search, point.setting);
    best.push_back({{"setting", point.setting},
                    {"change", describe_change(report.knobs, baseline, point.setting)},
                    {"predicted_goodput_rps", point.predicted_rps},
                    {"goodput_rps", measured ? nlohmann::json(measured->goodput_rps())
                                             : nlohmann::json(nullptr)}});
  }
  return {{"configurations", search.grid->ranked.size()},
          {"refused", search.grid->refused},
          {"seconds", search.grid->seconds},
          {"best", std::move(best)}};
}

std::string grid_markdown(const TuneReport& report) {
  const SearchResult& search = report.search;
  if (!search.grid) return "";
  const Setting& baseline = search.candidates.front().setting;
  std::string text = fmt::format(
      "\n## The simulated grid\n\n{} configurations predicted in {:.1f} s{}; the best {}, and "
      "what the search measured of them:\n\n| rank | change from baseline | predicted req/s | "
      "goodput req/s |\n|---|---|---|---|\n",
      search.grid->ranked.size(), search.grid->seconds,
      search.grid->refused > 0 ? fmt::format(" ({} refused the workload)", search.grid->refused)
                               : "",
      std::min(kGridShown, search.grid->ranked.size()));
  for (size_t i = 0; i < search.grid->ranked.size() && i < kGridShown; ++i) {
    const GridPoint& point = search.grid->ranked[i];
    const Candidate* measured = measured_candidate(search, point.setting);
    text += fmt::format("| {} | {} | {:.3g} | {} |\n", i + 1,
                        describe_change(report.knobs, baseline, point.setting),
                        point.predicted_rps, measured ? goodput_text(*measured) : "-");
  }
  return text;
}

}  // namespace

std::vector<std::string> why_it_wins(const TuneReport& report) {
  const SearchResult& search = report.search;
  const Candidate& baseline = search.candidates.front();
  const Candidate& best = search.candidates[search.best];
  if (search.best == 0) {
    return {"No challenger met the SLO at a higher rate than the baseline: the baseline stays."};
  }
  std::vector<std::string> why;
  for (const Knob& knob : report.knobs) {
    const std::string& from = baseline.setting.at(knob.name);
    const std::string& to = best.setting.at(knob.name);
    if (from != to) why.push_back(fmt::format("{} {} (was {}): {}.", knob.name, to, from, knob.effect));
  }
  if (!baseline.measured()) return why;
  const Goodput& base = baseline.measurements.front();
  if (std::isfinite(base.missed_at)) {
    for (const bench::RateTrial& trial : base.trials) {
      if (trial.rate != base.missed_at) continue;
      std::string line = fmt::format("At {} the baseline missed {}", rate_text(trial.rate),
                                     fmt::join(trial.misses, ", "));
      if (const bench::RateTrial* met = met_at_or_above(best, trial.rate)) {
        line += fmt::format("; the best met the SLO at {} ({})", rate_text(met->rate),
                            latency_text(report.endpoint, met->stats));
      }
      why.push_back(line + ".");
      break;
    }
  }
  if (baseline.goodput_rps() > 0) {
    why.push_back(fmt::format("Goodput {:.3g} → {:.3g} req/s ({:.2f}×).", baseline.goodput_rps(),
                              best.goodput_rps(), best.goodput_rps() / baseline.goodput_rps()));
  }
  return why;
}

std::string ranked_table(const TuneReport& report) {
  std::string table =
      embeddings(report)
          ? "| rank | change from baseline | predicted req/s | search req/s | re-measured req/s | "
            "goodput req/s | E2E p99 ms | inputs/s | peak memory MiB | stage |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
          : "| rank | change from baseline | predicted req/s | search req/s | re-measured req/s | "
            "goodput req/s | TTFT p99 ms | TPOT p99 ms | peak memory MiB | stage |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n";
  const Setting& baseline = report.search.candidates.front().setting;
  int rank = 0;
  for (const size_t index : ranking(report.search)) {
    const Candidate& candidate = report.search.candidates[index];
    const bench::RateTrial* at = nullptr;
    if (candidate.measured()) at = candidate.measurements.front().at_goodput();
    table += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} |\n",
        candidate.measured() ? std::to_string(++rank) : "-",
        describe_change(report.knobs, baseline, candidate.setting),
        candidate.predicted_rps ? fmt::format("{:.3g}", *candidate.predicted_rps) : "-",
        search_text(candidate), remeasured_text(candidate), goodput_text(candidate),
        !at                  ? "-"
        : embeddings(report) ? fmt::format("{:.0f}", at->stats.e2e_ms.p99)
                             : fmt::format("{:.0f}", at->stats.ttft_ms.p99),
        !at                  ? "-"
        : embeddings(report) ? fmt::format("{:.3g}", at->stats.embedding_throughput)
                             : fmt::format("{:.0f}", at->stats.tpot_ms.p99),
        candidate.peak_memory_bytes > 0
            ? fmt::format("{:.0f}", candidate.peak_memory_bytes / (1 << 20))
            : "-",
        candidate.stage, candidate.note.empty() ? "" : " (" + candidate.note + ")");
  }
  return table;
}

nlohmann::json report_json(const TuneReport& report) {
  const SearchResult& search = report.search;
  nlohmann::json knobs = nlohmann::json::array();
  for (const Knob& knob : report.knobs) {
    nlohmann::json values = nlohmann::json::array();
    for (const KnobValue& value : knob.values) values.push_back(value.label);
    knobs.push_back({{"name", knob.name},
                     {"values", values},
                     {"baseline", knob.baseline},
                     {"predicted", knob.predicted},
                     {"effect", knob.effect}});
  }
  nlohmann::json candidates = nlohmann::json::array();
  for (const size_t index : ranking(search)) {
    candidates.push_back(candidate_json(report, search.candidates[index]));
  }
  const Candidate& baseline = search.candidates.front();
  const Candidate& best = search.candidates[search.best];
  return {{"server", report.server},
          {"model", report.model},
          {"slo", report.slo},
          {"endpoint", report.endpoint},
          {"budget_s", report.budget_s},
          {"elapsed_s", report.elapsed_s},
          {"stopped", search.stopped},
          {"requests_per_run", report.requests_per_run},
          {"workload", report.workload},
          {"prediction",
           report.prediction_origin.empty()
               ? nlohmann::json(nullptr)
               : nlohmann::json{{"origin", report.prediction_origin},
                                {"unpredicted_limits", report.unpredicted_limits}}},
          {"knobs", std::move(knobs)},
          {"grid", grid_json(report)},
          {"baseline", candidate_json(report, baseline)},
          {"best", candidate_json(report, best)},
          {"improvement", baseline.goodput_rps() > 0
                              ? nlohmann::json(best.goodput_rps() / baseline.goodput_rps())
                              : nlohmann::json(nullptr)},
          {"why", why_it_wins(report)},
          {"candidates", std::move(candidates)}};
}

std::string report_markdown(const TuneReport& report) {
  const SearchResult& search = report.search;
  const Candidate& best = search.candidates[search.best];
  std::string text = fmt::format(
      "# brisk tune\n\n{} on {}, SLO `{}`, budget {} (used {}{}), {} measured requests per "
      "rate trial.\n\n",
      report.server, report.model, report.slo, format_duration(report.budget_s),
      format_duration(std::round(report.elapsed_s)),
      search.stopped.empty() ? "" : ", stopped: " + search.stopped, report.requests_per_run);
  if (!report.prediction_origin.empty()) {
    text += "Predictions: brisk plan, " + report.prediction_origin + ".\n\n";
  }
  text += ranked_table(report) + grid_markdown(report) + "\n## Why it wins\n\n";
  for (const std::string& line : why_it_wins(report)) text += "- " + line + "\n";
  text += "\n## Command\n\n```\n" + best.command + "\n```\n";
  return text;
}

bool write_report_files(const TuneReport& report, const std::string& dir, std::string& error) {
  std::error_code fs_error;
  std::filesystem::create_directories(dir, fs_error);
  if (fs_error) {
    error = "--out " + dir + ": " + fs_error.message();
    return false;
  }
  std::ofstream json(std::filesystem::path(dir) / "report.json");
  json << report_json(report).dump(2) << "\n";
  std::ofstream markdown(std::filesystem::path(dir) / "report.md");
  markdown << report_markdown(report);
  if (!json || !markdown) {
    error = "cannot write the report into " + dir;
    return false;
  }
  return true;
}

std::string latency_text(const std::string& endpoint, const bench::RunStatistics& stats) {
  if (endpoint == "embeddings") return fmt::format("E2E p99 {:.0f} ms", stats.e2e_ms.p99);
  return fmt::format("TTFT p99 {:.0f} ms, TPOT p99 {:.0f} ms", stats.ttft_ms.p99, stats.tpot_ms.p99);
}

}  // namespace brisk::tune
