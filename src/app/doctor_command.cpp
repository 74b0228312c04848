#include "app/commands.h"
#include "app/duration_flag.h"
#include "doctor/doctor_run.h"

namespace brisk {

CommandRunner register_doctor_command(CLI::App& app) {
  auto options = std::make_shared<doctor::DoctorOptions>();
  app.add_option("--url", options->url,
                 "Base URL of the OpenAI-compatible server to diagnose (default: start brisk "
                 "serve on the default model and diagnose it)");
  app.add_option("--model", options->model,
                 "Model name sent (default: the first of GET /v1/models)");
  app.add_option("--model-file", options->model_file,
                 "GGUF, config.json or brisk plan preset of the served model, for the hardware "
                 "floor (default: the served model's name)");
  app.add_option("--device", options->device,
                 "brisk plan catalog id of the accelerator, for the hardware floor (auto: the "
                 "GPU NVML finds)")
      ->capture_default_str();
  app.add_option("--api-key", options->api_key, "Sent as 'Authorization: Bearer KEY'");
  app.add_option("--budget", options->budget_s, "How long the whole probe may take: 90s, 5m (a bare number is seconds)")
      ->transform(duration_seconds())
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-concurrency", options->max_concurrency,
                 "Most requests the probe has in flight (the ramp doubles up to it)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--slo", options->slo,
                 "Limits such as ttft_p99=500ms,tpot_p99=50ms: the ramp stops when a load point "
                 "misses them");
  app.add_option("--usd-per-hour", options->usd_per_hour,
                 "Price of the serving hardware: adds $/1M output tokens")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", options->out_dir, "Directory for report.md, report.html, report.json");
  app.add_option("--progress", options->progress, "auto, bar, lines or off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();
  app.add_option("--server-pid", options->server_pid,
                 "The server's process id, when the listening port belongs to another process "
                 "(a proxy in front of it)")
      ->check(CLI::PositiveNumber);
  app.add_option("--workload", options->workload,
                 "Request trace (brisk's JSONL, Mooncake's JSONL or Azure's CSV; docs/trace.md) "
                 "whose lengths and prefix sharing the probes take instead of the defaults");
  app.add_option("--short-input-tokens", options->short_input_tokens,
                 "Prompt length of the short probes, or of each embeddings input (default 32, "
                 "embeddings 64, or the trace's median)")
      ->check(CLI::Range(4, 100000));
  app.add_option("--long-input-tokens", options->long_input_tokens,
                 "Prompt length of the long, repeated-prefix and mixed probes (default 320, or the "
                 "trace's 90th percentile)")
      ->check(CLI::Range(16, 1000000));
  app.add_option("--endpoint", options->endpoint,
                 "What to probe: completions (a chat model), embeddings, rerank (a reranker: a "
                 "16-token query and --inputs-per-request documents), or auto (embeddings or "
                 "rerank where GET /v1/models says the model is an embedding model or a reranker)")
      ->check(CLI::IsMember({"auto", "completions", "embeddings", "rerank"}))
      ->capture_default_str();
  app.add_option("--inputs-per-request", options->inputs_per_request,
                 "--endpoint embeddings: inputs in each request; rerank: documents (their length "
                 "is --short-input-tokens, default 64)")
      ->check(CLI::Range(1, 2048))
      ->capture_default_str();
  app.add_option("--seed", options->seed, "Seed of the synthetic prompts")->capture_default_str();
  app.add_option("--serve-args", options->serve_args,
                 "Without --url: brisk serve's flags for the child, e.g. \"--model smollm2-135m "
                 "--max-seqs 8\" (default: --model gemma3-270m)")
      ->delimiter(' ');
  return [options] { return doctor::run_doctor(*options); };
}

}  // namespace brisk
