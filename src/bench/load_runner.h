#pragma once

#include <chrono>
#include <vector>

#include "bench/request_record.h"
#include "bench/target_endpoint.h"
#include "bench/workload.h"

namespace brisk::bench {

// How load is offered at one point of a sweep. Only the closed loop exists today: `concurrency`
// virtual users, each sending its next request as soon as the previous one finished. An open
// loop (requests issued on an arrival schedule, whatever the server's progress) will add a rate
// here and its own dispatcher next to run_closed_loop; records and statistics stay the same.
struct LoadPoint {
  int concurrency = 1;
};

struct RunOptions {
  LoadPoint load;
  int run_index = 0;        // position in the sweep; makes prompts unique across runs
  int num_requests = 64;    // measured requests
  int warmup_requests = 2;  // sent first, at the same concurrency, and excluded from statistics
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per request
};

struct RunResult {
  LoadPoint load;
  // Warmup requests first, then measured ones, ordered by index (not by completion).
  std::vector<RequestRecord> records;
  TimePoint start{};  // start of the measured phase: the zero of every offset in requests.csv
  TimePoint end{};    // when the last measured request ended
};

// Runs one closed-loop load point to completion on the calling thread. Connections opened
// during warmup are kept for the measured phase, so it starts warm.
RunResult run_closed_loop(const TargetEndpoint& target, const SyntheticWorkload& workload,
                          const RunOptions& options);

}  // namespace brisk::bench
