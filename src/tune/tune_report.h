#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/config_search.h"
#include "tune/knob.h"

namespace brisk::tune {

// A finished search and what it ran against: DIR/report.json and report.md (docs/tune.md).
struct TuneReport {
  std::string server;  // "brisk serve" or the --server-cmd template
  std::string model;
  std::string slo;
  // What each trial sent: completions, chat or embeddings (whose latency is E2E alone).
  std::string endpoint = "completions";
  double budget_s = 0;
  double elapsed_s = 0;
  int requests_per_run = 0;
  nlohmann::json workload;          // brisk bench's description of what each run sent
  std::string prediction_origin;    // empty: no prediction (a --server-cmd server)
  std::vector<std::string> unpredicted_limits;
  std::vector<Knob> knobs;
  SearchResult search;
};

// Why the best configuration beats the baseline, in sentences: each changed knob with what it
// trades, and the SLO limit that held the baseline back against what the best measured there.
std::vector<std::string> why_it_wins(const TuneReport& report);

// A trial's P99 latencies in words, for `endpoint`'s trials: an embeddings answer has only
// its E2E; the others their TTFT and TPOT.
std::string latency_text(const std::string& endpoint, const bench::RunStatistics& stats);

// The measured candidates, best first, then the pruned ones, as a Markdown table.
std::string ranked_table(const TuneReport& report);

nlohmann::json report_json(const TuneReport& report);
std::string report_markdown(const TuneReport& report);
bool write_report_files(const TuneReport& report, const std::string& dir, std::string& error);

}  // namespace brisk::tune
