#include "doctor/probe_stages.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "bench/run_statistics.h"
#include "doctor/probe_point.h"
#include "doctor/probe_workloads.h"

namespace brisk::doctor {

Stages::Stages(const ProbeOptions& options, const bench::TokenCalibration& calibration,
               TimePoint timeline_zero)
    : options_(options),
      calibration_(calibration),
      start_(Clock::now()),
      timeline_zero_(timeline_zero) {}

double Stages::elapsed_s() const { return seconds_between(start_, Clock::now()); }

bench::RunResult Stages::run(const std::string& label, const bench::Workload& workload,
                             int concurrency, int requests, int warmup) {
  bench::RunOptions run;
  run.load.concurrency = concurrency;
  run.run_index = ++run_index_;
  run.num_requests = requests;
  run.warmup_requests = warmup;
  run.timeout = options_.request_timeout;
  run.stop_starting_at = start_ + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.budget_s));
  std::optional<bench::ProgressDisplay> progress;
  if (options_.progress != bench::ProgressStyle::off) {
    progress.emplace(options_.progress,
                     fmt::format("doctor {:>5.1f}/{:.0f}s {}", elapsed_s(), options_.budget_s,
                                 label),
                     requests, 0);
    run.progress = &progress->counters();
  }
  return bench::run_closed_loop(options_.target, workload, run);
}

std::pair<double, double> Stages::window(const bench::RunResult& run) const {
  if (run.records.empty()) return {-1, -1};
  return {seconds_between(timeline_zero_, run.start), seconds_between(timeline_zero_, run.end)};
}

ProbePoint Stages::summarize(const std::string& stage, int concurrency,
                             const bench::RunResult& run,
                             const std::function<bool(const bench::RequestRecord&)>& keep) const {
  ProbePoint point = summarize_point(stage, concurrency, run, keep);
  if (point.ok + point.failed > 0) std::tie(point.start_s, point.end_s) = window(run);
  return point;
}

std::unique_ptr<bench::SyntheticWorkload> Stages::synthetic(int input, int output, uint64_t salt,
                                                            bench::ApiKind kind,
                                                            int inputs) const {
  return make_synthetic(options_.target, calibration_, options_.model, input, output,
                        options_.seed * 1000 + salt, kind, inputs);
}

int fit_requests(int wanted, double each_s, double remaining_s, int minimum) {
  if (each_s <= 0) return wanted;
  return std::clamp(static_cast<int>(remaining_s / each_s), minimum, wanted);
}

std::vector<std::string> slo_misses(const std::optional<bench::Slo>& slo,
                                    const bench::RunResult& run) {
  if (!slo) return {};
  const bench::RunStatistics stats = bench::compute_run_statistics(
      run.records, run.start, run.end, bench::LatencyOrigin::sent, &*slo);
  return slo->misses(stats);
}

}  // namespace brisk::doctor
