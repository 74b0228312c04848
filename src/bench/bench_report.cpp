#include "bench/bench_report.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace brisk::bench {

namespace {

using json = nlohmann::json;

// null for a latency with no samples (TTFT with --no-stream, ITL of 1-token outputs): not
// measured is not 0 ms.
json summary_json(const LatencySummary& s) {
  if (s.count == 0) {
    return {{"mean", nullptr}, {"std", nullptr}, {"p50", nullptr}, {"p90", nullptr},
            {"p95", nullptr},  {"p99", nullptr}, {"max", nullptr}};
  }
  return {{"mean", s.mean}, {"std", s.std}, {"p50", s.p50}, {"p90", s.p90},
          {"p95", s.p95},   {"p99", s.p99}, {"max", s.max}};
}

json load_json(const LoadPoint& load) {
  if (load.sessions > 0) {
    json out = {{"sessions", load.sessions}};
    if (load.trace) out["arrivals"] = "trace";
    return out;
  }
  if (!load.open_loop()) return {{"concurrency", load.concurrency}};
  json out = {{"rate", std::isinf(load.rate) ? json("inf") : json(load.rate)}};
  if (load.concurrency > 0) out["max_concurrency"] = load.concurrency;
  if (load.trace) out["arrivals"] = "trace";
  return out;
}

// What the measured throughput costs at `usd_per_hour`; null without a price or throughput.
json usd_per(std::optional<double> usd_per_hour, double units_per_second, double units) {
  if (!usd_per_hour || units_per_second <= 0) return nullptr;
  return *usd_per_hour / 3600.0 / units_per_second * units;
}

json run_json(const LoadPointOutcome& outcome, std::optional<double> usd_per_hour,
              const std::optional<Slo>& slo) {
  const RunStatistics& s = outcome.stats;
  json run = {
      {"load", load_json(outcome.run.load)},
      {"start_monotonic_ns",
       std::chrono::duration_cast<std::chrono::nanoseconds>(outcome.run.start.time_since_epoch())
           .count()},
      {"requests", {{"ok", s.ok}, {"failed", s.failed}, {"timeouts", s.timeouts}}},
      {"errors", s.errors},
      {"ttft_ms", summary_json(s.ttft_ms)},
      {"itl_ms", summary_json(s.itl_ms)},
      {"tpot_ms", summary_json(s.tpot_ms)},
      {"e2e_ms", summary_json(s.e2e_ms)},
      {"request_throughput", s.request_throughput},
      {"input_token_throughput", s.input_token_throughput},
      {"output_token_throughput", s.output_token_throughput},
      {"embedding_throughput", s.embedding_throughput},
      {"duration_s", s.duration_s},
      {"chunk_token_mismatch", s.chunk_token_mismatch},
      {"new_connections", s.new_connections},
      {"requests_without_usage", s.requests_without_usage},
      {"itl_same_read_gaps", s.itl_same_read_gaps},
      {"achieved_rate", s.achieved_rate},
      {"schedule_lag_ms", summary_json(s.schedule_lag_ms)},
      {"usd_per_million_output_tokens", usd_per(usd_per_hour, s.output_token_throughput, 1e6)},
      {"usd_per_thousand_requests", usd_per(usd_per_hour, s.request_throughput, 1e3)}};
  if (!outcome.workload.is_null()) run["workload"] = outcome.workload;
  run["server"] = outcome.server;
  run["goodput"] = slo ? json(s.goodput) : json(nullptr);
  run["slo_met"] = slo ? json(slo->run_meets(s)) : json(nullptr);
  return run;
}

// Milliseconds from `origin`, or an empty cell for an event that did not happen.
std::string offset_cell(TimePoint origin, TimePoint at) {
  if (at == TimePoint{}) return "";
  return fmt::format("{:.3f}", ms_between(origin, at));
}

// Milliseconds from `from` to `to`, or an empty cell when either did not happen.
std::string duration_cell(TimePoint from, TimePoint to) {
  if (from == TimePoint{} || to == TimePoint{}) return "";
  return fmt::format("{:.3f}", ms_between(from, to));
}

// A time the server reported about itself (-1 when it did not), or an empty cell.
std::string server_ms_cell(double ms) { return ms >= 0 ? fmt::format("{:.1f}", ms) : ""; }

// Every content chunk's arrival, ms from `origin`, separated by spaces.
std::string chunk_offsets(TimePoint origin, const std::vector<TimePoint>& chunks) {
  std::string cell;
  for (const TimePoint at : chunks) {
    if (!cell.empty()) cell.push_back(' ');
    cell += fmt::format("{:.3f}", ms_between(origin, at));
  }
  return cell;
}

std::string csv_quoted(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted.push_back('"');
    quoted.push_back(c == '\n' || c == '\r' ? ' ' : c);
  }
  return quoted + "\"";
}

}  // namespace

json report_json(const BenchReport& report) {
  json runs = json::array();
  for (const LoadPointOutcome& outcome : report.runs) {
    runs.push_back(run_json(outcome, report.usd_per_hour, report.slo));
  }
  json document = {{"target",
                    {{"url", report.target.url},
                     {"endpoint", report.target.endpoint},
                     {"model", report.target.model}}},
                   {"workload", report.workload},
                   {"runs", runs}};
  if (report.slo) {
    json limits = json::object();
    for (const SloLimit& limit : report.slo->limits) {
      limits[limit.metric + "_" + limit.stat + "_ms"] = limit.limit_ms;
    }
    document["slo"] = limits;
  }
  if (report.max_rate_meeting_slo) {
    const double rate = *report.max_rate_meeting_slo;
    document["max_rate_meeting_slo"] = std::isinf(rate) ? json("inf") : json(rate);
  }
  return document;
}

void write_requests_csv(const BenchReport& report, std::ostream& out) {
  out << "run,request,concurrency,scheduled_ms,sent_ms,first_token_ms,end_ms,prompt_tokens,"
         "completion_tokens,chunks,status,error,error_detail,chunk_ms,new_connection,connect_ms,"
         "send_ms,wait_ms,receive_ms,session,turn,server_queue_ms,server_ttft_ms,"
         "cached_prompt_tokens\n";
  for (size_t run = 0; run < report.runs.size(); ++run) {
    const RunResult& result = report.runs[run].run;
    for (const RequestRecord& r : result.records) {
      if (r.warmup) continue;
      out << fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", run, r.index,
          r.in_flight_at_send, offset_cell(result.start, r.scheduled),
          offset_cell(result.start, r.sent), offset_cell(result.start, r.first_content()),
          offset_cell(result.start, r.end), r.prompt_tokens, r.completion_tokens,
          r.content_chunks.size(), r.http_status, r.ok() ? "" : std::string(error_name(r.error)),
          csv_quoted(r.error_detail), chunk_offsets(result.start, r.content_chunks),
          r.new_connection ? 1 : 0, duration_cell(r.connect_started, r.sent),
          duration_cell(r.sent, r.written), duration_cell(r.written, r.first_byte),
          duration_cell(r.first_byte, r.end), r.session >= 0 ? std::to_string(r.session) : "",
          r.turn >= 0 ? std::to_string(r.turn) : "", server_ms_cell(r.server_queue_ms),
          server_ms_cell(r.server_ttft_ms),
          r.cached_prompt_tokens >= 0 ? std::to_string(r.cached_prompt_tokens) : "");
    }
  }
}

std::string summary_table(const BenchReport& report) {
  std::string table =
      fmt::format("{:>16} {:>5} {:>5} {:>8} {:>10} {:>17} {:>15} {:>15} {:>17} {:>8} {:>10}\n",
                  "load", "ok", "fail", "req/s", "out tok/s", "TTFT p50/p99 ms", "ITL p50/p99",
                  "TPOT p50/p99", "E2E p50/p99 ms", "mismatch", "lag p99 ms");
  for (const LoadPointOutcome& outcome : report.runs) {
    const RunStatistics& s = outcome.stats;
    auto pair = [](const LatencySummary& l) {
      return l.count == 0 ? std::string("-") : fmt::format("{:.1f}/{:.1f}", l.p50, l.p99);
    };
    const LoadPoint& load = outcome.run.load;
    std::string load_label = load.sessions > 0       ? fmt::format("sessions={}", load.sessions)
                             : !load.open_loop()     ? fmt::format("c={}", load.concurrency)
                             : load.trace            ? fmt::format("trace {:.3g}/s", load.rate)
                             : std::isinf(load.rate) ? std::string("r=inf")
                                                     : fmt::format("r={:.3g}/s", load.rate);
    if (outcome.workload.contains("input_tokens")) {
      load_label =
          fmt::format("{} in={:g}", load_label, outcome.workload["input_tokens"].get<double>());
    }
    table += fmt::format(
        "{:>16} {:>5} {:>5} {:>8.2f} {:>10.1f} {:>17} {:>15} {:>15} {:>17} {:>8} {:>10.2f}\n",
        load_label, s.ok, s.failed, s.request_throughput, s.output_token_throughput,
        pair(s.ttft_ms), pair(s.itl_ms), pair(s.tpot_ms), pair(s.e2e_ms), s.chunk_token_mismatch,
        s.schedule_lag_ms.p99);
    if (s.total_embeddings > 0) {
      const bool rerank = outcome.workload.is_object() &&
                          outcome.workload.value("endpoint", "") == "rerank";
      table += fmt::format("{:>16} {} {:.1f}/s, input tokens {:.0f}/s\n", "",
                           rerank ? "documents scored" : "embeddings", s.embedding_throughput,
                           s.input_token_throughput);
    }
  }
  return table;
}

bool write_report_files(const BenchReport& report, const std::filesystem::path& directory,
                        std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    error = "cannot create " + directory.string() + ": " + ec.message();
    return false;
  }
  std::ofstream result_file(directory / "result.json");
  result_file << report_json(report).dump(2) << "\n";
  std::ofstream csv_file(directory / "requests.csv");
  write_requests_csv(report, csv_file);
  if (!result_file || !csv_file) {
    error = "cannot write the report files in " + directory.string();
    return false;
  }
  return true;
}

}  // namespace brisk::bench
