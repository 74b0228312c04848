#pragma once

#include <optional>
#include <string>
#include <vector>

namespace brisk::doctor {

// Every `brisk doctor` flag, as parsed (docs/cli.md lists them).
struct DoctorOptions {
  std::string url;         // empty: start `brisk serve` as a child and diagnose it
  std::string model;       // sent with requests; empty: the first of GET /v1/models
  std::string model_file;  // for the hardware floor; empty: the served model's name
  std::string device = "auto";
  std::string api_key;
  double budget_s = 60;
  int max_concurrency = 16;
  std::string slo;
  std::optional<double> usd_per_hour;
  std::string out_dir;
  std::string progress = "auto";
  int server_pid = -1;
  std::vector<std::string> serve_args;  // for the child; default: the default model
  std::string workload;                 // a request trace whose lengths and sharing the probe takes
  // "auto" (embeddings where GET /v1/models says the model is one), "completions" or
  // "embeddings"; and the embeddings probe's inputs in each request.
  std::string endpoint = "auto";
  int inputs_per_request = 1;
  // Unset: the trace's, or ProbeLengths's defaults. Set: wins over the trace.
  std::optional<int> short_input_tokens;
  std::optional<int> long_input_tokens;
  unsigned long seed = 0;
};

// Runs the probe, diagnoses it, prints the report and writes --out. Returns the exit status: 0
// when a diagnosis was made (whatever it says), 2 for bad input or an unreachable target.
int run_doctor(const DoctorOptions& options);

}  // namespace brisk::doctor
