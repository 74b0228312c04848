#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/sampling_options.h"

namespace brisk {

// Every `brisk bench` flag, as parsed; docs/cli.md lists them.
struct BenchFlags {
  std::string url = "http://127.0.0.1:8080";
  std::string endpoint = "completions";
  int inputs_per_request = 1;
  std::string model;
  std::string api_key;
  std::vector<int> concurrency{1};
  std::vector<std::string> rates;  // open loop when given; "inf" sends all at once
  std::string arrival = "poisson";
  double burstiness = 1.0;
  int max_concurrency = 0;
  int num_requests = 64;
  std::optional<double> duration_s;  // instead of num_requests
  int warmup_requests = 2;
  std::string input_tokens = "128";   // a LengthDistribution spec
  std::string output_tokens = "128";  // a LengthDistribution spec
  bool output_tokens_given = false;
  std::string dataset;   // JSONL test set
  std::string sharegpt;  // ShareGPT JSON file
  std::string preset;    // e.g. "standard"
  std::string trace;     // a trace to replay
  std::string trace_format = "auto";
  double time_scale = 1.0;
  std::optional<double> max_duration_s;
  std::vector<int> sessions;  // chat sessions per load point; a list runs a sweep
  int turns = 4;
  int system_tokens = 0;         // each --sessions conversation's own system prompt
  std::string think_time = "1";  // a ThinkTime spec, seconds
  bool replay_sessions = false;  // --trace's session ids become conversations
  std::string progress = "auto";
  bool busy_poll = false;
  std::string retry_after = "honour";  // closed loop: wait a refusal's Retry-After
  uint64_t seed = 0;
  double timeout_s = 300;
  bool no_stream = false;
  bench::SamplingOptions sampling;  // its extra_body is filled from `extra_body` after parsing
  std::string extra_body;           // --extra-body's JSON text
  std::string out_dir;
  std::optional<double> usd_per_hour;
  std::vector<std::string> compare;  // two result.json files: print them side by side, run nothing
  std::string slo;                   // e.g. "ttft_p99=500ms,tpot_p99=50ms"
  bool find_max_rate = false;
  int search_steps = 5;
};

// Registers the flags on `app`, writing into `flags` (which must outlive parsing). Returns the
// --output-tokens option, whose count tells whether the user gave it.
CLI::Option* add_bench_flags(CLI::App& app, BenchFlags& flags);

}  // namespace brisk
