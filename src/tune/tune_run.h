#pragma once

#include <string>
#include <vector>

#include "bench/length_distribution.h"

namespace brisk::tune {

// Everything `brisk tune` was asked (app/tune_command.cpp fills it from the flags).
struct TuneOptions {
  std::string model = "gemma3-270m";  // brisk serve --model, and {model} of --server-cmd
  std::string slo;                    // "ttft_p99=2s,tpot_p99=200ms"
  double budget_s = 1200;
  std::string base_flags;  // brisk serve's flags to start from and compare against
  std::string server_cmd;  // any server instead, with {placeholders}
  // A brisk doctor report.json (or its directory): measure each finding's prescribed brisk serve
  // flags against --base-flags instead of searching.
  std::string verify;
  std::vector<std::string> grid;  // --grid NAME=V1,V2 | NAME=LOW..HIGH, one per placeholder
  std::string out_dir;
  std::string emit;  // "k8s" or "haproxy": the winner as deployment files (brisk serve only)
  std::string device = "cpu-2vcpu";  // brisk plan catalog entry of this machine, for predictions
  // The workload, as brisk bench takes it. "auto": embeddings for an embedding model (its GGUF
  // declares a pooling type), else completions.
  std::string endpoint = "auto";
  int inputs_per_request = 1;  // embeddings: inputs in each request
  bool output_tokens_given = false;  // --output-tokens was given (an embedding model refuses it)
  bench::LengthDistribution input_tokens = bench::LengthDistribution::fixed_at(128);
  bench::LengthDistribution output_tokens = bench::LengthDistribution::fixed_at(64);
  std::string dataset;  // JSONL prompts
  uint64_t seed = 1;
  // Open-loop arrivals of every rate trial: "poisson" (what users send) or "constant" (evenly
  // spaced: a server's capacity shows as a sharp edge).
  std::string arrival = "poisson";
  // Measured requests of one rate trial (plus 2 warm-up requests); 0: what the SLO's highest
  // percentile needs (requests_to_resolve), at least kDefaultRequestsPerRun.
  int requests_per_run = 0;
  static constexpr int kDefaultRequestsPerRun = 24;
  // Search tuning.
  double margin = 0.08;
  int measure_top = 4;  // the simulated grid's best, measured
  int confirm_top = 2;
  int confirm_repeats = 1;
  double ready_timeout_s = 300;
  std::string progress = "auto";
};

// Runs the whole search and writes DIR/report.json and DIR/report.md; prints the ranked table
// and the winning command. Returns the process exit code: 0 with a report, 1 when nothing could
// be measured, 2 on bad flags.
int run_tune(const TuneOptions& options);

}  // namespace brisk::tune
