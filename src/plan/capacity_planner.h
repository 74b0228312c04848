#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/slo_limits.h"
#include "plan/hardware_catalog.h"
#include "plan/memory_model.h"
#include "plan/queueing_model.h"
#include "plan/trace_summary.h"

namespace brisk::plan {

struct PlanRequest {
  ModelProfile model;
  Precision precision;
  Workload workload;
  std::vector<SloLimit> slo;         // metrics ttft/tpot/e2e, stats mean/p50/p95/p99
  std::vector<std::string> devices;  // catalog ids; empty: every entry
  int max_devices = 8;
  double headroom = 0.2;
  double kv_bytes_per_element = 2;
  std::string kv_cache_type = "f16";  // --kv-precision: what brisk serve deploys, where it can
  int step_token_budget = 512;
  ChunkPolicy chunking;
  std::map<std::string, Efficiency> calibrated;  // by device id
  // --simulator serve: where a calibration measured the model's steps, predict loads with brisk
  // serve's own scheduler on them (plan/served_simulation.h) instead of the roofline simulation.
  bool simulate_server = false;
  // An open loop's spread (LoadPrediction::spread of each candidate's target load; the report
  // prints the recommended one's): this many seeded runs of the sample's requests from its
  // seed on (workload.arrival_sample), else of kSpreadRequests from seed 0 (brisk bench's
  // default) on; 0: none.
  int spread_runs = 10;
  static constexpr int kSpreadRequests = 100;
  // The request trace `workload` was taken from (--workload TRACE), for the report.
  std::optional<TraceSummary> trace;
};

// One way to serve the workload: `replicas` copies of the model, each over `deployment.devices`
// devices with tensor parallelism.
struct Candidate {
  Deployment deployment;
  int replicas = 1;
  MemoryBreakdown memory;      // one device, at the planned load
  LoadPrediction at_target;    // one replica, carrying its share of the target load
  int max_concurrency = 0;     // one replica: most users it serves within the SLO and memory
  LoadPrediction at_capacity;  // one replica at max_concurrency
  double max_rate_per_s = 0;   // one replica, open loop (only for --rate)
  bool fits = false;           // the model and one sequence fit at all
  bool meets_slo = false;      // the target load is served within the SLO and --max-devices
  std::string problem;         // why not, in words
  double usd_per_hour = 0;     // all devices
  // Cost of a token when the replicas run at max_concurrency (busy, within the SLO).
  std::optional<double> usd_per_million_output_tokens;

  int device_count() const { return deployment.devices * replicas; }
};

struct Plan {
  std::vector<Candidate> candidates;  // ranked: meeting the SLO first, then cheapest per hour
  std::optional<size_t> recommended;  // index into candidates
  std::vector<std::string> reasons;   // for the recommendation, in plain words
};

// Fails (nullopt, `error`) only on input it cannot plan with: an unknown device id, an SLO
// statistic the model does not predict, an empty workload.
std::optional<Plan> make_plan(const PlanRequest& request, const HardwareCatalog& catalog,
                              std::string* error);

// One replica of `request`'s model over `devices` of `device`, as the planner simulates it: this
// machine's calibration when `request.calibrated` has one for the device, its step budget and
// chunking.
Deployment deployment_for(const PlanRequest& request, const DeviceSpec& device, int devices);

// The highest Poisson rate one replica of `request`'s model on one `device` serves within the
// SLO (request.workload's lengths; its rate is ignored), with at most `max_sequences` requests
// running (brisk serve --max-seqs: the rest queue, and their wait counts in TTFT; 0: as many as
// the device's memory holds). 0 when even the lowest rate misses or the model does not fit.
// `tolerance`: the bisection stops within this share of the rate (0: plan's own, 1e-4 on the
// roofline, 1e-2 with brisk serve's scheduler).
double predict_max_rate(const PlanRequest& request, const DeviceSpec& device, int max_sequences,
                        double tolerance = 0);

// Whether a prediction meets every limit; `misses` lists the ones it does not.
bool meets(const std::vector<SloLimit>& slo, const LoadPrediction& prediction,
           std::vector<std::string>* misses = nullptr);

}  // namespace brisk::plan
