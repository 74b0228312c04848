#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/performance_model.h"

namespace brisk::plan {

// The traffic to plan for: prompts and completions of fixed mean length, offered either as a
// number of users each sending its next request when the last one finishes (closed loop), or as
// Poisson arrivals at a rate (open loop).
// The arrivals of one `brisk bench --rate R --arrival poisson --seed S --num-requests N` run
// (common/arrival_schedule.h), every one of them measured.
struct ArrivalSample {
  uint64_t seed = 1;
  int requests = 0;
};

struct Workload {
  int input_tokens = 512;
  int output_tokens = 256;
  // Of input_tokens, those a prefix cache serves (a trace's shared prefixes): they fill the KV
  // cache and are attended to, but are not prefilled.
  int cached_prompt_tokens = 0;
  int concurrency = 0;    // closed loop, when > 0
  double rate_per_s = 0;  // open loop, when > 0
  // All `concurrency` requests arrive at once and none follows: a benchmark's first wave, or
  // `--request-rate inf` with that many prompts.
  bool burst = false;
  // Open loop: predict the very arrivals of one brisk bench run instead of a long Poisson run.
  std::optional<ArrivalSample> arrival_sample;
};

struct Percentiles {
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
  double at(const std::string& stat) const;  // "mean", "p50", "p95", "p99"
};

// A range a figure falls in: [low, high].
struct Interval {
  double low = 0;
  double high = 0;
  bool contains(double value) const { return value >= low && value <= high; }
};

// What one finite run of Poisson arrivals may measure: each percentile over `runs` seeded runs
// of `requests` arrivals each (the arrivals `brisk bench --rate R --arrival poisson --seed S
// --num-requests N` sends, for S = first_seed, first_seed + 1, ...), as the range from its 10th
// to its 90th percentile across the runs. A p99 of 100 requests is one clump of arrivals more or
// less: this says how far apart two honest measurements of the same load can land.
struct PredictionSpread {
  int runs = 0;
  int requests = 0;        // per run
  int saturated_runs = 0;  // runs whose rate the replica cannot keep up with (left out)
  struct Of {
    Interval p50;
    Interval p95;
    Interval p99;
  };
  Of ttft_ms;
  Of tpot_ms;
};

// Steady state of one replica under a load.
struct LoadPrediction {
  bool saturated = false;    // the offered load exceeds what the replica can serve
  double decode_batch = 0;   // mean sequences decoding per step
  double prefill_share = 0;  // fraction of engine time spent on prompt chunks
  double in_flight = 0;      // mean requests admitted (prefilling or decoding)
  double in_flight_p99 = 0;
  Percentiles ttft_ms;
  Percentiles tpot_ms;
  double e2e_ms = 0;
  double request_throughput = 0;       // requests/s
  double output_token_throughput = 0;  // tokens/s
  // Open loops the plan reports: the spread of finite runs (predict_open_loop_spread).
  std::optional<PredictionSpread> spread;
};

// Continuous batching with chunked prefill, decode first (brisk's and vLLM's policy), simulated
// step by step: brisk serve's scheduler, each step costed by Deployment::step. Percentiles are
// over the simulated requests, as brisk bench reports measured ones.
//
// A closed loop of C users, each sending its next request as the last one ends: with fixed
// lengths it settles into waves (users that started together stay together), which no
// random-phase formula sees; measured after the first wave and before the last.
// `cached_tokens` of every prompt come from a prefix cache: only the rest is prefilled.
LoadPrediction predict_closed_loop(const Deployment& deployment, int input_tokens,
                                   int output_tokens, int concurrency, int cached_tokens = 0);
// All `requests` arrive at once.
LoadPrediction predict_burst(const Deployment& deployment, int input_tokens, int output_tokens,
                             int requests, int cached_tokens = 0);
// Poisson arrivals at `rate_per_s` (1,500 seeded arrivals, the first tenth left out; or, given
// `sample`, exactly the arrivals brisk bench sends with that seed). Whether the
// replica keeps up at all is decided in closed form: prompts take a share rho = rate x
// prefill_extra of engine time, decode steps stretch to step / (1 - rho), and by Little's law the
// decode batch grows without bound past the replica's capacity (`saturated`).
LoadPrediction predict_open_loop(const Deployment& deployment, int input_tokens, int output_tokens,
                                 double rate_per_s,
                                 const std::optional<ArrivalSample>& sample = std::nullopt,
                                 int cached_tokens = 0);

// The spread of `runs` seeded runs of `requests` Poisson arrivals at `rate_per_s` (seeds
// first_seed, first_seed + 1, ...), each predicted as predict_open_loop predicts one brisk bench
// run's arrivals. Nullopt when every run saturates.
std::optional<PredictionSpread> predict_open_loop_spread(const Deployment& deployment,
                                                         int input_tokens, int output_tokens,
                                                         double rate_per_s, int requests,
                                                         uint64_t first_seed, int runs,
                                                         int cached_tokens = 0);

// When request `index` of a burst reaches the server: one after another, a microsecond apart
// (a client sends "all at once" one request after another; the first step carries the first
// prompt alone). Closed-loop users whose answers end in one step send theirs the same way.
double burst_arrival_ms(int index);

// An open loop's arrivals (ms) and whether each is measured: exactly one brisk bench run's with
// `sample` (all measured), else `requests` seeded Poisson arrivals, the first tenth left out as
// the run's warm-up.
std::vector<std::pair<double, bool>> open_loop_arrivals(double rate_per_s,
                                                        const std::optional<ArrivalSample>& sample,
                                                        int requests = 1500);

// Simulated requests, summarized as brisk bench summarizes measured ones (linear between ranks).
Percentiles percentiles_of(std::vector<double> values);

// Quantile of a Poisson distribution with mean `mean` (smallest k with CDF >= q). A double: the
// planner's search passes means far beyond an int (8e9 chunks for gemma3-270m at a saturating
// rate), where converting to int was undefined behaviour (on x86: INT_MIN, a negative TPOT).
double poisson_quantile(double mean, double q);

}  // namespace brisk::plan
