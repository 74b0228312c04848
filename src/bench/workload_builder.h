#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/length_distribution.h"
#include "bench/target_endpoint.h"
#include "bench/trace_workload.h"
#include "bench/workload.h"
#include "bench/workload_preset.h"

namespace brisk::bench {

// What the user asked to send, before anything is read or tokenized.
struct WorkloadSpec {
  ApiKind kind = ApiKind::completions;
  std::string model;
  LengthDistribution input_tokens = LengthDistribution::fixed_at(128);
  LengthDistribution output_tokens = LengthDistribution::fixed_at(128);
  bool output_tokens_given = false;  // true: overrides a dataset's own output lengths
  std::string jsonl_path;            // a fixed test set, one prompt per line
  std::string sharegpt_path;         // a ShareGPT-format JSON file
  int sharegpt_wanted = 1000;        // conversations to sample from it
  uint64_t seed = 0;
  bool stream = true;
  SamplingOptions sampling;    // sent with every request, whatever the source
  int inputs_per_request = 1;  // --endpoint embeddings: --inputs-per-request
};

// A workload ready to send, and its description for result.json's "workload".
struct BuiltWorkload {
  std::unique_ptr<Workload> workload;
  nlohmann::json description;
  std::string summary;  // one line for the terminal
};

// Reads the dataset (if any) and sizes synthetic prompts with the target's /tokenize (when it
// has one). nullopt with `error` saying what to change.
std::optional<BuiltWorkload> build_workload(const WorkloadSpec& spec, const TargetEndpoint& target,
                                            const TokenCalibration& calibration,
                                            std::chrono::milliseconds timeout, std::string& error);

// One synthetic workload per preset case, with that case's lengths; each description carries
// the case's name as "case".
std::vector<BuiltWorkload> build_preset_workloads(WorkloadSpec spec,
                                                  const std::vector<PresetCase>& cases,
                                                  const TargetEndpoint& target,
                                                  const TokenCalibration& calibration,
                                                  std::chrono::milliseconds timeout);

// A trace to replay (brisk bench --trace): the requests it keeps and the workload that sends
// them (each run's first `warmup` requests short ones of its own).
struct TraceReplay {
  BuiltWorkload built;
  const TraceWorkload* prompts = nullptr;  // built.workload, for session replay's texts
  TraceSchedule schedule;
};
std::optional<TraceReplay> build_trace_replay(
    const std::string& path, TraceFormat format, const TraceReplayOptions& options,
    const WorkloadSpec& spec, int warmup, const TargetEndpoint& target,
    const TokenCalibration& calibration, std::chrono::milliseconds timeout, std::string& error);

}  // namespace brisk::bench
