#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/commands.h"
#include "bench/http_fetch.h"
#include "common/json_file.h"
#include "common/model_store.h"
#include "plan/calibration.h"
#include "plan/capacity_planner.h"
#include "plan/deployment_emitter.h"
#include "plan/multi_model_fit.h"
#include "plan/plan_report.h"
#include "plan/trace_summary.h"

namespace brisk {
namespace {

struct PlanFlags {
  std::vector<std::string> models;  // several: their memory fit side by side
  int input_tokens = 512;
  int output_tokens = 256;
  int concurrency = 0;
  double rate = 0;
  bool burst = false;
  std::optional<uint64_t> seed;
  int num_requests = 0;
  int spread_runs = 10;
  std::string slo;
  std::string workload_file;
  std::string trace_format = "auto";
  bool input_given = false;
  bool output_given = false;
  bool load_given = false;
  std::vector<std::string> devices;
  int max_devices = 8;
  std::string precision;
  std::string kv_precision = "f16";
  double headroom = 0.2;
  int step_token_budget = 512;
  plan::ChunkPolicy chunking;
  std::string catalog;
  bool json = false;
  std::string emit;  // "k8s" or "haproxy": deployment files instead of the table
  std::string explain;
  bool uncalibrated = false;
  std::string simulator = "roofline";
};

struct CalibrateFlags {
  std::vector<std::string> models;
  std::string device;
  std::string catalog;
  int gpu_layers = 0;
  int threads = 0;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  int context_tokens = 256;
  int repeats = 5;
  std::string from_server;  // a running brisk serve's URL: its learned step costs instead
};

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

// A brisk bench result.json is one JSON object with "workload" or "runs"; --workload reads
// anything else as a request trace.
std::optional<nlohmann::json> read_bench_result(const std::string& file) {
  std::string read_error;
  auto document = read_json_file(file, read_error);
  if (!document || !document->is_object() ||
      !(document->contains("workload") || document->contains("runs"))) {
    return std::nullopt;
  }
  return document;
}

// Takes prompt/output lengths (and the first run's load) from a `brisk bench` result.json, for
// the flags the user did not give.
bool apply_bench_workload(PlanFlags& flags, const nlohmann::json& result, std::string* error) {
  const nlohmann::json workload = result.is_object()
                                      ? result.value("workload", nlohmann::json::object())
                                      : nlohmann::json::object();
  if (!workload.is_object() || !workload.contains("input_tokens") ||
      !workload["input_tokens"].is_number() || !workload.contains("output_tokens") ||
      !workload["output_tokens"].is_number()) {
    *error = "--workload '" + flags.workload_file +
             "' has no workload.input_tokens/output_tokens (is it a brisk bench result.json?)";
    return false;
  }
  if (!flags.input_given) {
    flags.input_tokens =
        std::max(1, static_cast<int>(std::lround(workload["input_tokens"].get<double>())));
  }
  if (!flags.output_given) {
    flags.output_tokens =
        std::max(1, static_cast<int>(std::lround(workload["output_tokens"].get<double>())));
  }
  const nlohmann::json runs = result.value("runs", nlohmann::json::array());
  if (!flags.load_given && runs.is_array() && !runs.empty() && runs[0].is_object() &&
      runs[0].contains("load") && runs[0]["load"].is_object()) {
    const nlohmann::json& load = runs[0]["load"];
    if (load.contains("concurrency") && load["concurrency"].is_number_integer()) {
      flags.concurrency = load["concurrency"].get<int>();
    }
    if (load.contains("rate") && load["rate"].is_number()) flags.rate = load["rate"].get<double>();
  }
  return true;
}

// Several --model: what brisk plan answers for them together (docs/plan.md, "Several models").
std::optional<std::string> check_several_models_flags(const PlanFlags& flags) {
  const std::pair<bool, const char*> one_model_only[] = {
      {flags.rate > 0, "--rate"},           {!flags.workload_file.empty(), "--workload"},
      {!flags.slo.empty(), "--slo"},        {!flags.emit.empty(), "--emit"},
      {!flags.explain.empty(), "--explain"}, {flags.burst, "--burst"},
      {flags.seed.has_value(), "--seed"}};
  for (const auto& [given, flag] : one_model_only) {
    if (given) {
      return fmt::format(
          "{} plans one model; with several --model brisk plan answers where they fit together "
          "(memory, device count, price) at --concurrency, --isl and --osl",
          flag);
    }
  }
  return std::nullopt;
}

// The first model's request, already built from the flags, and one like it for each other model.
int plan_several(const PlanFlags& flags, const plan::PlanRequest& first,
                 const plan::HardwareCatalog& catalog) {
  for (const std::string& id : flags.devices) {
    if (catalog.find(id) == nullptr) {
      return fail("unknown --devices entry '" + id + "'; the catalog has: " + catalog.ids());
    }
  }
  std::vector<plan::PlanRequest> requests = {first};
  for (size_t i = 1; i < flags.models.size(); ++i) {
    std::string error;
    auto model = plan::resolve_model_profile(flags.models[i], &error);
    if (!model) return fail(error);
    plan::PlanRequest request = first;
    request.model = *model;
    if (flags.precision.empty()) {
      request.precision =
          model->stored_precision ? *model->stored_precision : *plan::parse_precision("bf16");
    }
    requests.push_back(std::move(request));
  }
  const plan::MultiModelFit fit = plan::fit_models(requests, catalog);
  if (flags.json) {
    std::cout << plan::multi_model_fit_json(requests, fit).dump(2) << "\n";
  } else {
    plan::print_multi_model_fit(std::cout, requests, fit);
  }
  return 0;
}

int run_plan(PlanFlags flags) {
  std::string error;
  std::optional<plan::TraceSummary> trace;
  if (!flags.workload_file.empty()) {
    if (!std::filesystem::exists(flags.workload_file)) {
      return fail("--workload '" + flags.workload_file + "': no such file");
    }
    const auto format = parse_trace_format(flags.trace_format);
    if (!format) return fail("--trace-format must be auto, brisk, mooncake or azure");
    const auto bench_result =
        *format == TraceFormat::automatic ? read_bench_result(flags.workload_file) : std::nullopt;
    if (bench_result) {
      if (!apply_bench_workload(flags, *bench_result, &error)) return fail(error);
    } else {
      trace = plan::read_trace_summary(flags.workload_file, *format, &error);
      if (!trace) {
        return fail("--workload '" + flags.workload_file +
                    "' is neither a brisk bench result.json nor a request trace (brisk or "
                    "Mooncake JSONL, Azure CSV): " +
                    error);
      }
    }
  }
  const auto catalog = plan::HardwareCatalog::load(flags.catalog, &error);
  if (!catalog) return fail(error);
  if (flags.models.size() > 1) {
    if (auto refused = check_several_models_flags(flags)) return fail(*refused);
  }
  auto model = plan::resolve_model_profile(flags.models.front(), &error);
  if (!model) return fail(error);

  plan::PlanRequest request;
  request.model = *model;
  if (!flags.precision.empty()) {
    const auto precision = plan::parse_precision(flags.precision);
    if (!precision) {
      return fail("unknown --precision '" + flags.precision + "' (one of " +
                  plan::precision_names() + ")");
    }
    request.precision = *precision;
  } else {
    request.precision =
        model->stored_precision ? *model->stored_precision : *plan::parse_precision("bf16");
  }
  if (const auto bytes = plan::kv_cache_bytes_per_element(flags.kv_precision)) {
    request.kv_bytes_per_element = *bytes;
    request.kv_cache_type = flags.kv_precision;
    std::transform(request.kv_cache_type.begin(), request.kv_cache_type.end(),
                   request.kv_cache_type.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  } else {
    return fail(
        "--kv-precision must be f16, bf16, f32, fp8, q8_0, q5_1, q5_0, q4_1, q4_0 or iq4_nl");
  }
  if (flags.concurrency > 0 && flags.rate > 0) {
    return fail("give either --concurrency or --rate, not both");
  }
  if (flags.burst && flags.rate > 0) return fail("--burst goes with --concurrency, not --rate");
  request.workload.input_tokens = flags.input_tokens;
  request.workload.output_tokens = flags.output_tokens;
  request.workload.concurrency = flags.concurrency;
  request.workload.rate_per_s = flags.rate;
  request.workload.burst = flags.burst;
  if (trace) {
    plan::apply_trace_summary(*trace, {flags.input_given, flags.output_given, flags.load_given},
                              request.workload);
    request.trace = std::move(trace);
  }
  if (flags.seed || flags.num_requests > 0) {
    if (flags.rate <= 0 || !flags.seed || flags.num_requests <= 0) {
      return fail(
          "--seed and --num-requests go together, with --rate: they name one brisk "
          "bench run's arrivals");
    }
    request.workload.arrival_sample = plan::ArrivalSample{*flags.seed, flags.num_requests};
  }
  if (!flags.slo.empty()) {
    auto limits = parse_slo_limits(flags.slo, error);
    if (!limits) return fail("--slo: " + error);
    request.slo = std::move(*limits);
  }
  request.devices = flags.devices;
  request.max_devices = flags.max_devices;
  request.headroom = flags.headroom;
  request.step_token_budget = flags.step_token_budget;
  request.chunking = flags.chunking;
  if (!flags.uncalibrated) request.calibrated = plan::load_calibrations(plan::calibration_file());
  request.simulate_server = flags.simulator == "serve";
  request.spread_runs = flags.spread_runs;
  if (flags.models.size() > 1) return plan_several(flags, request, *catalog);

  const auto plan = plan::make_plan(request, *catalog, &error);
  if (!plan) return fail(error);
  if (!flags.emit.empty()) {
    if (!plan->recommended) {
      return fail("--emit " + flags.emit +
                  ": no candidate serves this load within the SLO, so there is nothing to "
                  "deploy (run without --emit to see why)");
    }
    const plan::Candidate& chosen = plan->candidates[*plan->recommended];
    std::cout << (flags.emit == "k8s" ? plan::kubernetes_manifests(request, chosen)
                                      : plan::haproxy_backend(request, chosen));
  } else if (flags.json) {
    std::cout << plan::plan_json(request, *plan).dump(2) << "\n";
  } else {
    plan::print_plan(std::cout, request, *plan);
  }
  if (!flags.explain.empty()) {
    const plan::Candidate* explained = nullptr;
    for (const plan::Candidate& candidate : plan->candidates) {
      if (candidate.deployment.device->id == flags.explain) explained = &candidate;
    }
    if (flags.explain == "best" && plan->recommended) {
      explained = &plan->candidates[*plan->recommended];
    }
    if (explained == nullptr) {
      return fail("--explain " + flags.explain + ": not among the candidates (" + catalog->ids() +
                  ", or best)");
    }
    plan::print_explanation(flags.json || !flags.emit.empty() ? std::cerr : std::cout, request,
                            *explained);
  }
  return 0;
}

// `--from-server URL`: the step costs a running brisk serve learned (GET /debug/scheduler), stored
// as the model's measured steps on the device.
int calibrate_from_server(const CalibrateFlags& flags, const plan::DeviceSpec& device) {
  if (flags.models.size() != 1) {
    return fail("--from-server takes one --model: the model the server serves");
  }
  std::string error;
  const ResolveResult resolved = ModelStore::from_environment().resolve(flags.models[0]);
  if (!resolved.ok()) return fail(resolved.error);
  const auto profile = plan::profile_from_gguf(resolved.path.string(), &error);
  if (!profile) return fail(error);
  const auto target = bench::parse_target_url(flags.from_server, error);
  if (!target) return fail("--from-server: " + error);
  const bench::FetchResult answer =
      bench::fetch(*target, "/debug/scheduler", "", std::chrono::seconds(10));
  if (!answer.ok()) {
    return fail(fmt::format("GET {}/debug/scheduler: {}", flags.from_server,
                            answer.error.empty() ? "HTTP " + std::to_string(answer.status) + " " +
                                                       answer.body
                                                 : answer.error));
  }
  const nlohmann::json scheduler = nlohmann::json::parse(answer.body, nullptr, false);
  const auto steps = plan::measured_steps_from_scheduler(scheduler, &error);
  if (!steps) return fail(flags.from_server + ": " + error);
  const auto file = plan::calibration_file();
  if (!plan::store_measured_steps(file, device, profile->name, *steps, &error)) return fail(error);
  std::string batches;
  for (const auto& [batch, ms] : steps->table.decode_ms_by_batch) {
    batches += fmt::format("{}{}: {:.1f} ms", batches.empty() ? "" : ", ", batch, ms);
  }
  fmt::print(
      "{}'s steps as {} learned them: decodes by batch ({}), a prompt token {:.2f} ms, a row "
      "{:.3f} us per KV cell\nstored in {}; `brisk plan` predicts {} on {} with brisk serve's "
      "scheduler on them\n",
      profile->name, flags.from_server, batches, steps->table.prefill_ms_per_token,
      steps->table.row_cell_ms * 1000, file.string(), profile->name, device.id);
  return 0;
}

int run_calibrate(const CalibrateFlags& flags) {
  std::string error;
  const auto catalog = plan::HardwareCatalog::load(flags.catalog, &error);
  if (!catalog) return fail(error);
  const plan::DeviceSpec* device = catalog->find(flags.device);
  if (device == nullptr) {
    return fail("unknown --device '" + flags.device + "'; the catalog has: " + catalog->ids());
  }
  if (!flags.from_server.empty()) return calibrate_from_server(flags, *device);
  plan::CalibrationOptions options;
  for (const std::string& name : flags.models) {
    const ResolveResult resolved = ModelStore::from_environment().resolve(name);
    if (!resolved.ok()) return fail(resolved.error);
    options.model_paths.push_back(resolved.path.string());
  }
  options.device_id = device->id;
  options.gpu_layers = flags.gpu_layers;
  options.threads = flags.threads;
  options.decode_batches = flags.batches;
  options.context_tokens = flags.context_tokens;
  options.repeats = flags.repeats;
  fmt::print("calibrating {} with {} model(s); this takes a minute\n", device->id,
             options.model_paths.size());
  const auto calibration = plan::calibrate(options, *device, &error);
  if (!calibration) return fail(error);
  fmt::print("{:<40} {:>6} {:>8} {:>8} {:>12} {:>10}\n", "model", "batch", "context", "prompt",
             "measured ms", "fitted ms");
  for (const plan::StepSample& sample : calibration->samples) {
    fmt::print("{:<40} {:>6.0f} {:>8.0f} {:>8.0f} {:>12.2f} {:>10.2f}\n",
               std::filesystem::path(sample.model).filename().string(), sample.decode_batch,
               sample.context, sample.prefill_tokens, sample.measured_ms, sample.fitted_ms);
  }
  const plan::Efficiency& efficiency = calibration->efficiency;
  fmt::print(
      "\n{}: bandwidth efficiency {:.3f} ({:.1f} GB/s achieved), compute efficiency {:.3f} in "
      "decode and {:.3f} in prompts (of the dense rate each model's weights use), step overhead "
      "{:.2f} ms, sampling {:.2f} ns per vocabulary entry; median fit error {:.1f}%\n",
      device->id, efficiency.bandwidth, efficiency.bandwidth * device->memory_bandwidth_gb_s,
      efficiency.compute, efficiency.prefill_compute, efficiency.step_overhead_ms,
      efficiency.sample_ns_per_vocab_entry, calibration->median_abs_error * 100);
  if (efficiency.bandwidth > 1 || efficiency.compute > 1 || efficiency.prefill_compute > 1) {
    fmt::print(
        "warning: this machine beat the catalog's peak for {} (efficiency above 1); its "
        "spec in data/hardware.toml is too low for this machine\n",
        device->id);
  }
  const auto file = plan::calibration_file();
  if (!plan::store_calibration(file, *calibration, &error)) return fail(error);
  fmt::print("stored in {}; `brisk plan` uses it for {} from now on\n", file.string(), device->id);
  return 0;
}

}  // namespace

CommandRunner register_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  auto calibrate_flags = std::make_shared<CalibrateFlags>();
  app.add_option("--model", flags->models,
                 "A preset (llama-3.1-8b, gemma3-270m, ...), a pulled model, a GGUF file or a "
                 "Hugging Face config.json; repeat it for several models served side by side "
                 "(their memory fit, device count and price)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI::Option* isl = app.add_option("--isl", flags->input_tokens, "Prompt tokens per request")
                         ->check(CLI::PositiveNumber);
  CLI::Option* osl = app.add_option("--osl", flags->output_tokens, "Output tokens per request")
                         ->check(CLI::PositiveNumber);
  app.add_option("--workload", flags->workload_file,
                 "A brisk bench result.json (its mean lengths and first load) or a request trace "
                 "(brisk or Mooncake JSONL, Azure CSV: its mean lengths, arrival rate and prefix "
                 "sharing), for the flags not given");
  app.add_option("--trace-format", flags->trace_format,
                 "The --workload trace's format: auto (default), brisk, mooncake, azure")
      ->check(CLI::IsMember({"auto", "brisk", "mooncake", "azure"}));
  CLI::Option* concurrency =
      app.add_option("--concurrency", flags->concurrency,
                     "Closed loop: users each sending the next request when the last one ends "
                     "(default 1)")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* rate =
      app.add_option("--rate", flags->rate, "Open loop: Poisson arrivals, requests per second")
          ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", flags->seed,
                 "With --rate and --num-requests: predict the arrivals `brisk bench --rate R "
                 "--arrival poisson --seed S --num-requests N` sends, instead of a long Poisson "
                 "run (exact for one replica)");
  app.add_option("--num-requests", flags->num_requests, "With --seed: that run's requests")
      ->check(CLI::PositiveNumber);
  app.add_option("--spread-runs", flags->spread_runs,
                 "With --rate: predict this many seeded runs of --num-requests requests (100 "
                 "without it) and report the range one run may measure (0: none)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* burst = app.add_flag(
      "--burst", flags->burst,
      "The --concurrency requests arrive at once and none follows (a benchmark's first "
      "wave; rate=inf with that many prompts)");
  app.add_option("--slo", flags->slo,
                 "Limits such as ttft_p95=500ms,tpot_p95=50ms (ttft, tpot, e2e at mean, p50, "
                 "p95, p99)");
  app.add_option("--devices", flags->devices, "Catalog ids to consider (default: all)")
      ->delimiter(',');
  app.add_option("--max-devices", flags->max_devices, "Most devices one plan may use")
      ->check(CLI::PositiveNumber);
  app.add_option("--precision", flags->precision,
                 "Weights: f16, bf16, fp8, int8, q8_0, q4_k_m, int4 (default: the GGUF's own, "
                 "else bf16)");
  app.add_option("--kv-precision", flags->kv_precision,
                 "KV cache element type: f16 (default), bf16, f32, q8_0, q5_1, q5_0, q4_1, q4_0, "
                 "iq4_nl (as brisk serve --cache-type-k/-v), or fp8 (a GPU format brisk serve "
                 "lacks: it deploys f16)");
  app.add_option("--headroom", flags->headroom, "Fraction of device memory kept free")
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--step-tokens", flags->step_token_budget,
                 "Tokens one engine step carries: the chunked-prefill size (brisk serve "
                 "--max-batched-tokens)")
      ->check(CLI::PositiveNumber);
  app.add_option("--target-itl-ms", flags->chunking.target_step_ms,
                 "brisk serve --target-itl-ms: while requests decode, prompt chunks are cut so a "
                 "step stays under it (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--long-prefill-tokens", flags->chunking.long_prefill_tokens,
                 "brisk serve --long-prefill-tokens: prompts longer than this are long (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-long-prefills", flags->chunking.max_long_prefills,
                 "brisk serve --max-long-prefills: long prompts prefilled at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--catalog", flags->catalog, "An edited copy of data/hardware.toml");
  CLI::Option* json = app.add_flag("--json", flags->json, "Print the plan as JSON");
  app.add_option("--emit", flags->emit,
                 "Print deployment files for the recommendation instead of the table: k8s (a "
                 "Deployment and a HorizontalPodAutoscaler) or haproxy (a backend)")
      ->check(CLI::IsMember({"k8s", "haproxy"}))
      ->excludes(json);
  app.add_option("--explain", flags->explain,
                 "Print the arithmetic behind one candidate (a device id, or 'best')");
  app.add_flag("--uncalibrated", flags->uncalibrated,
               "Ignore stored calibrations; use default efficiencies everywhere");
  app.add_option("--simulator", flags->simulator,
                 "What predicts a load: roofline (a model of brisk serve's scheduler over the "
                 "roofline step) or serve (brisk serve's own scheduler on the steps `brisk plan "
                 "calibrate` measured for the model; the roofline where none were)")
      ->check(CLI::IsMember({"roofline", "serve"}));

  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "Measure this machine's efficiency factors by running models through brisk's "
      "engine, and store them for `brisk plan`");
  calibrate
      ->add_option("--model", calibrate_flags->models,
                   "GGUF file or pulled model; repeat with a second size to fit the "
                   "per-step overhead too")
      ->required();
  calibrate
      ->add_option("--device", calibrate_flags->device,
                   "The catalog id of this machine's device (e.g. cpu-2vcpu, h200)")
      ->required();
  calibrate->add_option("--catalog", calibrate_flags->catalog, "An edited data/hardware.toml");
  calibrate
      ->add_option("--gpu-layers", calibrate_flags->gpu_layers,
                   "Layers to offload (999: all; needs a CUDA build)")
      ->check(CLI::Range(0, 100000));
  calibrate->add_option("--threads", calibrate_flags->threads, "CPU threads (0: all cores)")
      ->check(CLI::Range(0, 1024));
  calibrate->add_option("--batches", calibrate_flags->batches, "Decode batch sizes to time")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  calibrate
      ->add_option("--context", calibrate_flags->context_tokens,
                   "Tokens already in each sequence's cache when decode steps are timed")
      ->check(CLI::Range(0, 1 << 20));
  calibrate->add_option("--repeats", calibrate_flags->repeats, "Timed steps per point (median)")
      ->check(CLI::Range(1, 1000));
  calibrate->add_option("--from-server", calibrate_flags->from_server,
                        "A running brisk serve's URL (serving --model on this device): store "
                        "the step costs it learned under its load instead of timing steps here");

  return [flags, calibrate_flags, calibrate, isl, osl, concurrency, rate, burst] {
    if (calibrate->parsed()) return run_calibrate(*calibrate_flags);
    if (flags->models.empty()) return fail("--model is required (try --model gemma3-270m)");
    flags->input_given = isl->count() > 0;
    flags->output_given = osl->count() > 0;
    flags->load_given = concurrency->count() + rate->count() + burst->count() > 0;
    return run_plan(*flags);
  };
}

}  // namespace brisk
