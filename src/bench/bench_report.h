#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/load_runner.h"
#include "bench/run_statistics.h"
#include "bench/slo.h"

namespace brisk::bench {

struct BenchTarget {
  std::string url;
  std::string endpoint;  // "completions" or "chat"
  std::string model;
};

// One finished load point: what was measured and what it adds up to.
struct LoadPointOutcome {
  RunResult run;
  RunStatistics stats;
  // This load point's own workload (a --preset case), or null when it is the report's.
  nlohmann::json workload;
  // What the server's /metrics counted during the load point (telemetry::server_metrics_delta),
  // or null when it has no /metrics brisk knows.
  nlohmann::json server;
};

struct BenchReport {
  BenchTarget target;
  // What was sent: lengths, dataset or preset, seed (see docs/bench-metrics.md).
  nlohmann::json workload;
  std::optional<double> usd_per_hour;  // price of the serving hardware, for cost per token
  std::vector<LoadPointOutcome> runs;
  std::optional<Slo> slo;
  std::optional<double> max_rate_meeting_slo;  // from --find-max-rate
};

// result.json. Its schema is stable: tools and CI compare files across brisk versions, so
// fields are only ever added (documented in docs/bench-metrics.md).
nlohmann::json report_json(const BenchReport& report);

// requests.csv: one row per measured request, times in ms from the start of its run.
void write_requests_csv(const BenchReport& report, std::ostream& out);

// One readable row per load point, for the terminal.
std::string summary_table(const BenchReport& report);

// Writes result.json and requests.csv into `directory` (created if missing).
bool write_report_files(const BenchReport& report, const std::filesystem::path& directory,
                        std::string& error);

}  // namespace brisk::bench
