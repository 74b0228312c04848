#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "bench/slo.h"
#include "bench/target_endpoint.h"
#include "doctor/evidence.h"
#include "doctor/telemetry_recorder.h"

namespace brisk::doctor {

// The staged probe of `brisk doctor`, all through brisk bench's load runner. Sizes are in the
// server's tokens; the defaults keep a 60 s budget enough on a 2-core CPU for a 270M model.
struct ProbeOptions {
  bench::TargetEndpoint target;
  std::string model;
  double budget_s = 60;
  int max_concurrency = 16;
  std::optional<bench::Slo> slo;
  bench::ProgressStyle progress = bench::ProgressStyle::off;
  int short_input_tokens = 32;
  int short_output_tokens = 16;
  int long_input_tokens = 320;
  int long_output_tokens = 8;
  int mixed_short_output_tokens = 32;
  uint64_t seed = 0;
  int server_pid = -1;  // < 0: found from the port when the server runs here
  std::chrono::milliseconds request_timeout{std::chrono::minutes(2)};
};

struct ProbeOutcome {
  Evidence evidence;
  std::vector<TelemetryReading> timeline;  // for report.html
};

// Runs every stage that fits the budget: (1) a cold request, a warm baseline at concurrency 1
// for short and long prompts; (2) a concurrency ramp (doubling) until throughput stops growing,
// the SLO is missed, --max-concurrency or the budget is reached; (3) prompts sharing a long
// prefix; (4) long prompts among short streams. nullopt with `error` when the target cannot be
// probed at all (unreachable, every request failing).
std::optional<ProbeOutcome> run_probe(const ProbeOptions& options, std::string& error);

}  // namespace brisk::doctor
