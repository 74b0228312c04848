#include "app/commands.h"
#include "app/duration_flag.h"
#include "bench/length_distribution.h"
#include "tune/tune_run.h"

namespace brisk {

namespace {

// CLI11 check that a flag's value is a length distribution brisk bench reads.
CLI::Validator length_distribution() {
  return CLI::Validator(
      [](std::string& value) {
        std::string error;
        return bench::parse_length_distribution(value, error) ? std::string() : error;
      },
      "N|uniform:MIN:MAX|normal:MEAN:SD");
}

}  // namespace

CommandRunner register_tune_command(CLI::App& app) {
  auto options = std::make_shared<tune::TuneOptions>();
  auto input = std::make_shared<std::string>("128");
  auto output = std::make_shared<std::string>("64");
  app.add_option("-m,--model", options->model,
                 "Model: brisk serve's --model (a catalog name or a GGUF), and --server-cmd's "
                 "{model}")
      ->capture_default_str();
  app.add_option("--slo", options->slo,
                 "Limits a configuration must meet, e.g. ttft_p99=2s,tpot_p99=200ms (required)")
      ->required();
  app.add_option("--budget", options->budget_s,
                 "Wall time the whole search may take: 20m, 90s, 1h (a hard cap)")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--base-flags", options->base_flags,
                 "brisk serve's flags to start from and compare against, e.g. \"--max-seqs 8 "
                 "--ctx-size 8192\" (default: its defaults)");
  auto* server_cmd = app.add_option(
      "--server-cmd", options->server_cmd,
      "Tune any server instead: its command with {port} and {placeholders}, e.g. "
      "'llama-server -m {model} --port {port} -np {slots}'");
  app.add_option("--grid", options->grid,
                 "Values of a --server-cmd placeholder: NAME=V1,V2 (the first is the baseline), "
                 "NAME=LOW..HIGH (powers of two) or NAME=LOW..HIGH:STEP; one per placeholder")
      ->needs(server_cmd);
  app.add_option("--verify", options->verify,
                 "A brisk doctor report.json (or its --out directory): measure each finding's "
                 "prescribed brisk serve flags against --base-flags instead of searching")
      ->excludes(server_cmd);
  app.add_option("--emit", options->emit,
                 "Also write the winner as deployment files: k8s (Deployment + autoscaler) or "
                 "haproxy (a backend), as brisk plan --emit does")
      ->check(CLI::IsMember({"k8s", "haproxy"}));
  app.add_option("--out", options->out_dir, "Directory for report.json and report.md");
  app.add_option("--device", options->device,
                 "brisk plan catalog id of this machine, for the predictions (its calibration "
                 "from `brisk plan calibrate` is used when there is one)")
      ->capture_default_str();
  app.add_option("--endpoint", options->endpoint,
                 "completions, chat or embeddings; auto: embeddings for an embedding model, "
                 "else completions")
      ->check(CLI::IsMember({"auto", "completions", "chat", "embeddings"}))
      ->capture_default_str();
  app.add_option("--inputs-per-request", options->inputs_per_request,
                 "Embeddings: inputs in each request (each of --input-tokens)")
      ->check(CLI::Range(1, 2048))
      ->capture_default_str();
  app.add_option("--input-tokens", *input, "Prompt lengths, as brisk bench takes them")
      ->check(length_distribution())
      ->capture_default_str();
  auto* output_option =
      app.add_option("--output-tokens", *output, "Answer lengths, as brisk bench takes them")
      ->check(length_distribution())
      ->capture_default_str();
  app.add_option("--arrival", options->arrival,
                 "Arrivals of each rate trial: poisson (as users send) or constant (evenly spaced)")
      ->check(CLI::IsMember({"poisson", "constant"}))
      ->capture_default_str();
  app.add_option("--dataset", options->dataset, "JSONL prompts instead of synthetic ones");
  app.add_option("--seed", options->seed, "Seed of the prompts and the arrivals")
      ->capture_default_str();
  app.add_option("--requests-per-run", options->requests_per_run,
                 "Measured requests of one rate trial (2 warm-up requests come first); default: "
                 "what the SLO's highest percentile needs (100 for a p99), at least 24")
      ->check(CLI::Range(4, 100000));
  app.add_option("--margin", options->margin,
                 "A challenger wins when it meets the SLO at the best goodput so far times 1 + "
                 "this")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--measure-top", options->measure_top,
                 "Best configurations of the simulated grid measured beside the baseline")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--confirm-top", options->confirm_top,
                 "Best configurations re-measured beside the baseline at the end")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app.add_option("--confirm-repeats", options->confirm_repeats,
                 "Re-measurements of each, interleaved")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app.add_option("--ready-timeout", options->ready_timeout_s,
                 "How long a candidate's server may take to become ready")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--progress", options->progress, "auto, bar, lines or off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();
  return [options, input, output, output_option] {
    std::string error;
    options->output_tokens_given = output_option->count() > 0;
    options->input_tokens = *bench::parse_length_distribution(*input, error);
    options->output_tokens = *bench::parse_length_distribution(*output, error);
    return tune::run_tune(*options);
  };
}

}  // namespace brisk
