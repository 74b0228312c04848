#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/load_runner.h"
#include "bench/slo.h"
#include "bench/workload.h"
#include "doctor/evidence.h"
#include "doctor/probe_plan.h"

namespace brisk::doctor {

// The doctor's clock and runner for one probe: each stage is a closed-loop run of brisk bench's
// load runner that stops starting requests when the budget ends, summed up with its window on
// the telemetry's clock. Both probes (chat and embeddings) run their stages through it.
class Stages {
 public:
  // `timeline_zero`: the telemetry's clock, on which each point's window is given.
  Stages(const ProbeOptions& options, const bench::TokenCalibration& calibration,
         TimePoint timeline_zero);

  double elapsed_s() const;
  double remaining_s() const { return options_.budget_s - elapsed_s(); }

  bench::RunResult run(const std::string& label, const bench::Workload& workload, int concurrency,
                       int requests, int warmup = 0);

  // summarize_point with the run's window on the telemetry's clock.
  ProbePoint summarize(const std::string& stage, int concurrency, const bench::RunResult& run,
                       const std::function<bool(const bench::RequestRecord&)>& keep = {}) const;
  // The run's window on the telemetry's clock; {-1, -1} when no request of it started.
  std::pair<double, double> window(const bench::RunResult& run) const;

  // Unique prompts of `input` tokens asking for `output` tokens (embeddings: `inputs` inputs of
  // `input` tokens per request; `output` is not sent).
  std::unique_ptr<bench::SyntheticWorkload> synthetic(
      int input, int output, uint64_t salt, bench::ApiKind kind = bench::ApiKind::completions,
      int inputs = 1) const;

 private:
  const ProbeOptions& options_;
  const bench::TokenCalibration& calibration_;
  TimePoint start_;
  TimePoint timeline_zero_;
  int run_index_ = 0;
};

// As many of `wanted` requests (at least `minimum`) as fit in `remaining_s` at `each_s` apiece.
int fit_requests(int wanted, double each_s, double remaining_s, int minimum);

// The SLO's limits that `run` missed; none without an SLO.
std::vector<std::string> slo_misses(const std::optional<bench::Slo>& slo,
                                    const bench::RunResult& run);

}  // namespace brisk::doctor
