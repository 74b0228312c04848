#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "bench/slo.h"
#include "bench/target_endpoint.h"
#include "doctor/evidence.h"
#include "doctor/probe_lengths.h"
#include "doctor/telemetry_recorder.h"

namespace brisk::doctor {

// The staged probe of `brisk doctor`, all through brisk bench's load runner.
struct ProbeOptions {
  bench::TargetEndpoint target;
  std::string model;
  double budget_s = 60;
  int max_concurrency = 16;
  std::optional<bench::Slo> slo;
  bench::ProgressStyle progress = bench::ProgressStyle::off;
  ProbeLengths workload;
  // embeddings: the embeddings probe (probe_embeddings.h), inputs of workload.short_input_tokens
  bench::ApiKind endpoint = bench::ApiKind::completions;
  int inputs_per_request = 1;
  uint64_t seed = 0;
  int server_pid = -1;  // < 0: found from the port when the server runs here
  std::chrono::milliseconds request_timeout{std::chrono::minutes(2)};
};

struct ProbeOutcome {
  Evidence evidence;
  std::vector<TelemetryReading> timeline;  // for report.html
};

// For a chat model, runs every stage that fits the budget: (1) a cold request, a warm baseline at concurrency 1
// for short and long prompts; (2) a concurrency ramp (doubling) until throughput stops growing,
// the SLO is missed, --max-concurrency or the budget is reached; (3) prompts sharing a long
// prefix (skipped when the workload shares none); (4) long prompts among short streams. Each
// point carries the resources the telemetry saw while it ran. nullopt with `error` when the target
// cannot be probed at all (unreachable, every request failing).
// For an embeddings endpoint, the embeddings probe instead (run_embedding_probe).
std::optional<ProbeOutcome> run_probe(const ProbeOptions& options, std::string& error);

}  // namespace brisk::doctor
