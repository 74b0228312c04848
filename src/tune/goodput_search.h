#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/rate_search.h"
#include "bench/request_record.h"
#include "bench/run_statistics.h"
#include "bench/slo.h"

namespace brisk::tune {

// The rate back-off that measures one configuration's goodput: the highest open-loop request
// rate whose run still meets every SLO limit (its P99s), as vLLM's auto_tune measures it.
struct GoodputSearchOptions {
  // Requests/s: a prediction, or the rate to beat. 0: unknown; the search first sends every
  // request at once and starts from half the throughput that burst achieved.
  double start_rate = 0;
  double growth = 1.5;    // rate factor while bracketing
  int refine_steps = 2;   // geometric bisections once a met and a missed rate bracket it
  int max_runs = 8;
  // Stop as soon as a rate at or below this misses: the configuration cannot beat the one that
  // met it (0: measure it whatever it is).
  double give_up_at_or_below = 0;
  // The search stops going down below start_rate / this (a configuration that misses even
  // there is not worth the minutes a slow run takes).
  double max_backoff = 16;
};

struct Goodput {
  double rate = 0;  // highest rate that met the SLO; 0: none did
  double missed_at = std::numeric_limits<double>::infinity();  // lowest rate that missed
  std::vector<bench::RateTrial> trials;
  bool gave_up = false;  // stopped below give_up_at_or_below
  std::string stopped;   // why it ended before bracketing and refining, in words
  double seconds = 0;    // wall time it took, server start included
  // The trial at the highest met rate, when one met.
  const bench::RateTrial* at_goodput() const;
};

// The SLO limits a trial missed: its P99s, and any request that failed (refused with a 429,
// rejected as too long for the configuration, cut off): a failed request is one whose latency
// is unbounded, so with fewer than 100 requests a single one is the P99 (more than 1% misses).
std::vector<std::string> trial_misses(const bench::Slo& slo, const bench::RunStatistics& stats);

// The fewest measured requests whose percentiles a trial can tell apart from its slowest
// request, for every limit of `slo`: a pXX needs 100 / (100 - XX) (a p99 100, a p95 20, a p90
// 10, a p50 2); a mean or a max, 1. With fewer, a p99 is the latency of the one slowest
// request: a single Poisson clump decides the trial. `limit` names the limit that needs most.
struct TrialResolution {
  int requests = 1;
  std::string limit;  // "ttft_p99"; empty when none needs more than one request
};
TrialResolution requests_to_resolve(const bench::Slo& slo);

// Why a trial can no longer meet `slo`, judged from its records so far at `now` (latencies from
// each request's scheduled send, as trials measure them; every measured record is there from
// the start, sent or not): more than 1% of its requests failed, or so many have already missed
// a TTFT, TPOT or E2E limit (answered over it, or still waiting past it) that the limit's
// percentile is over it whatever the rest do. Empty while it still can. brisk tune abandons a
// trial as soon as this speaks (bench::RunOptions::abandon_if): an overloaded trial would
// otherwise spend minutes draining a queue to measure a miss already certain.
std::string trial_cannot_meet(const bench::Slo& slo,
                              const std::vector<bench::RequestRecord>& records, TimePoint now);

// Runs `run_at(rate)` from options.start_rate up by `growth` while it meets the SLO, down while
// it misses, then bisects the bracket; a rate of infinity sends every request at once. `out_of_time` is asked before every run after the first.
Goodput search_goodput(const bench::Slo& slo, const GoodputSearchOptions& options,
                       const std::function<bench::RunStatistics(double rate)>& run_at,
                       const std::function<bool()>& out_of_time = {});

}  // namespace brisk::tune
