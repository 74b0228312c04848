#pragma once

#include <functional>
#include <string>

#include "bench/load_runner.h"
#include "doctor/evidence.h"

namespace brisk::doctor {

// Summarizes the measured requests of one run (those `keep` accepts, all by default) as a
// probe point: the client's latencies through brisk bench's statistics, plus the server's own
// timings and cache reuse where the server reported them.
ProbePoint summarize_point(const std::string& stage, int concurrency, const bench::RunResult& run,
                           const std::function<bool(const bench::RequestRecord&)>& keep = {});

}  // namespace brisk::doctor
