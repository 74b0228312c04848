#include "tune/tune_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "bench/http_fetch.h"
#include "bench/load_runner.h"
#include "bench/progress.h"
#include "bench/run_statistics.h"
#include "bench/server_process.h"
#include "bench/slo.h"
#include "bench/workload_builder.h"
#include "common/clock.h"
#include "common/duration.h"
#include "common/model_store.h"
#include "common/subprocess.h"
#include "plan/deployment_emitter.h"
#include "plan/model_profile.h"
#include "tune/command_line.h"
#include "tune/config_search.h"
#include "tune/goodput_prediction.h"
#include "tune/prescriptions.h"
#include "tune/serve_knobs.h"
#include "tune/server_template.h"
#include "tune/tune_report.h"

namespace brisk::tune {

namespace {

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

double steady_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Peak resident memory of a process (VmHWM), in bytes; 0 when it cannot be read.
double peak_resident_bytes(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024;
  }
  return 0;
}

// How each candidate's server is started: brisk serve with knob flags, or a template.
class ServerFactory {
 public:
  virtual ~ServerFactory() = default;
  virtual bench::ServerLaunch launch(const Setting& setting) const = 0;
  virtual std::string name() const = 0;
  // The command as a user would run it for good: without the port tune picked.
  virtual std::string display_command(const Setting& setting) const = 0;
};

class BriskServeFactory : public ServerFactory {
 public:
  BriskServeFactory(const ServeKnobs& serve) : serve_(serve) {}
  // The fixed flags, less those the knobs set (brisk serve refuses a flag given twice), then the
  // knobs' flags, then the context a per-sequence layout needs.
  std::vector<std::string> args_for(const Setting& setting) const {
    std::vector<std::string> args = serve_.fixed_args;
    const std::vector<std::string> knob_args = setting_args(serve_.knobs, setting);
    for (const auto& [name, value] : flags_as_setting(knob_args)) {
      if (!value.empty()) take_flag(args, {"--" + name});
    }
    args.insert(args.end(), knob_args.begin(), knob_args.end());
    if (const auto context = per_sequence_context(serve_, setting)) {
      take_flag(args, {"--ctx-size", "-c"});
      args.insert(args.end(), {"--ctx-size", std::to_string(*context)});
    }
    return args;
  }
  bench::ServerLaunch launch(const Setting& setting) const override {
    return bench::brisk_serve_launch(args_for(setting), "tune-serve");
  }
  std::string display_command(const Setting& setting) const override {
    std::vector<std::string> argv = {"brisk", "serve"};
    const std::vector<std::string> args = args_for(setting);
    argv.insert(argv.end(), args.begin(), args.end());
    return describe_command(argv);
  }
  std::string name() const override { return "brisk serve"; }

 private:
  const ServeKnobs& serve_;
};

class TemplateFactory : public ServerFactory {
 public:
  TemplateFactory(ServerTemplate server, std::string model, std::string command)
      : server_(std::move(server)), model_(std::move(model)), command_(std::move(command)) {}
  bench::ServerLaunch launch(const Setting& setting) const override {
    bench::ServerLaunch launch;
    launch.port = bench::free_loopback_port();
    launch.argv = render_command(
        server_, setting,
        {{"port", std::to_string(launch.port)}, {"host", "127.0.0.1"}, {"model", model_}});
    launch.log_path = (std::filesystem::temp_directory_path() /
                       ("brisk-tune-server-" + std::to_string(getpid()) + ".log"))
                          .string();
    return launch;
  }
  std::string name() const override { return command_; }
  std::string display_command(const Setting& setting) const override {
    return describe_command(render_command(
        server_, setting, {{"port", "{port}"}, {"host", "127.0.0.1"}, {"model", model_}}));
  }

 private:
  ServerTemplate server_;
  std::string model_;
  std::string command_;
};

// Measures candidates: starts each one's server, sends the workload at the rates the goodput
// search asks for, and stops the server again.
class CandidateMeasurer {
 public:
  CandidateMeasurer(const TuneOptions& options, const bench::Slo& slo,
                    const ServerFactory& servers, const std::vector<Knob>& knobs, Budget& budget)
      : options_(options), slo_(slo), servers_(servers), knobs_(knobs), budget_(budget) {}

  Goodput measure(const Setting& setting, const GoodputSearchOptions& search,
                  Candidate& candidate) {
    bench::ServerLaunch launch = servers_.launch(setting);
    launch.ready_timeout_s = std::max(1.0, std::min(options_.ready_timeout_s, budget_.left_s()));
    std::string error;
    bench::ServerProcess server(launch, error);
    candidate.command = servers_.display_command(setting);
    Goodput goodput;
    if (!server.running()) {
      candidate.note = "did not start: " + error.substr(0, error.find('\n'));
      std::cerr << "  " << error << "\n";
      goodput.stopped = "server did not start";
      return goodput;
    }
    bench::TargetEndpoint target;
    target.host = "127.0.0.1";
    target.port = std::to_string(server.port());
    if (!workload_ && !build_workload(target, error)) {
      candidate.note = error;
      goodput.stopped = error;
      return goodput;
    }
    goodput = search_goodput(
        slo_, search,
        [&](double rate) { return run_at(target, rate, setting); },
        [&] { return budget_.spent(); });
    candidate.peak_memory_bytes = peak_resident_bytes(server.pid());
    return goodput;
  }

  const nlohmann::json& workload_description() const { return description_; }

 private:
  bool build_workload(const bench::TargetEndpoint& target, std::string& error) {
    const auto timeout = std::chrono::milliseconds(30'000);
    const auto model = bench::first_served_model(target, timeout, error);
    if (!model) {
      error = "the server lists no model: " + error;
      return false;
    }
    bench::WorkloadSpec spec;
    spec.kind = options_.endpoint == "chat"         ? bench::ApiKind::chat
                : options_.endpoint == "embeddings" ? bench::ApiKind::embeddings
                                                    : bench::ApiKind::completions;
    spec.stream = spec.kind != bench::ApiKind::embeddings;
    spec.inputs_per_request = options_.inputs_per_request;
    spec.model = *model;
    spec.input_tokens = options_.input_tokens;
    spec.output_tokens = options_.output_tokens;
    spec.output_tokens_given = true;
    spec.jsonl_path = options_.dataset;
    spec.seed = options_.seed;
    const bench::TokenCalibration calibration = bench::calibrate_tokens(target, *model, timeout);
    auto built = bench::build_workload(spec, target, calibration, timeout, error);
    if (!built) return false;
    description_ = built->description;
    workload_ = std::move(built->workload);
    return true;
  }

  bench::RunStatistics run_at(const bench::TargetEndpoint& target, double rate,
                              const Setting& setting) {
    bench::RunOptions run;
    // Fresh prompts for every trial: a server's prefix cache (llama-server keeps 8 GiB of them)
    // would otherwise serve a repeated trial's prompts without computing them.
    run.run_index = trials_run_++;
    run.load.concurrency = 0;  // open loop, nothing held back by the client
    run.load.rate = rate;
    run.load.arrival = options_.arrival == "constant" ? bench::ArrivalProcess::constant
                                                      : bench::ArrivalProcess::poisson;
    run.num_requests = options_.requests_per_run;
    run.warmup_requests = 2;
    // Every arrival after the budget's end is dropped, and no request outlives it by much.
    run.schedule_s = bench::arrival_offsets_s(run.load, run.num_requests, options_.seed);
    // A slow trial is cut short: arrivals past a twentieth of the budget (at least 30 s) are
    // dropped, but never below the requests the SLO's percentile needs; and none comes after
    // the budget's end.
    const double longest_s = std::max(30.0, budget_.total_s() / 20);
    const size_t resolving = static_cast<size_t>(std::max(4, requests_to_resolve(slo_).requests));
    while (run.schedule_s.size() > resolving && run.schedule_s.back() > longest_s) {
      run.schedule_s.pop_back();
    }
    while (run.schedule_s.size() > 1 && run.schedule_s.back() > budget_.left_s()) {
      run.schedule_s.pop_back();
    }
    if (run.schedule_s.empty()) run.schedule_s.push_back(0);
    run.timeout = std::chrono::milliseconds(
        static_cast<long>(std::clamp(budget_.left_s(), 10.0, 600.0) * 1000));
    bench::ProgressDisplay progress(
        bench::progress_style_for(options_.progress),
        fmt::format("{} left · {} @ {:.3g} req/s", format_duration(std::round(budget_.left_s())),
                    describe_setting_short(setting), rate),
        static_cast<int>(run.schedule_s.size()), 0);
    run.progress = &progress.counters();
    run.abandon_if = [&](const std::vector<bench::RequestRecord>& records, TimePoint now) {
      return trial_cannot_meet(slo_, records, now);
    };
    const bench::RunResult result = bench::run_open_loop(target, *workload_, run, options_.seed);
    progress.stop();
    bench::RunStatistics stats = bench::compute_run_statistics(
        result.records, result.start, result.end, bench::LatencyOrigin::scheduled, &slo_);
    stats.abandoned = result.abandoned;
    const std::vector<std::string> misses = trial_misses(slo_, stats);
    std::cerr << fmt::format("  {} @ {:.3g} req/s: {} ({}, {} ok, {} failed)\n",
                             describe_setting_short(setting), rate,
                             misses.empty() ? "meets the SLO"
                                            : "misses " + fmt::format("{}", fmt::join(misses, ", ")),
                             latency_text(options_.endpoint, stats), stats.ok, stats.failed);
    return stats;
  }

  std::string describe_setting_short(const Setting& setting) const {
    return describe_change(knobs_, baseline_setting(knobs_), setting);
  }

  const TuneOptions& options_;
  const bench::Slo& slo_;
  const ServerFactory& servers_;
  const std::vector<Knob>& knobs_;
  Budget& budget_;
  std::unique_ptr<bench::Workload> workload_;
  nlohmann::json description_;
  int trials_run_ = 0;
};


// What to search: the knobs, how to start a candidate's server, and the prediction, if any.
struct SearchSpace {
  ServeKnobs serve;  // brisk serve: its fixed flags and knobs
  std::vector<Knob> knobs;
  std::unique_ptr<ServerFactory> servers;
  std::optional<GoodputPrediction> prediction;
  Setting predicted_base;  // brisk serve's knob values under --verify's prescriptions
  std::vector<Setting> verify;  // --verify: every setting to measure, besides the baseline
  SearchOptions::Refusal refusal;  // why a setting cannot serve the workload, if it cannot
};

// --endpoint auto: embeddings when --model is an embedding model (its GGUF declares a pooling
// type), else completions; a model plan cannot read (not pulled yet) is taken as generative.
std::string resolved_endpoint(const TuneOptions& options) {
  if (options.endpoint != "auto") return options.endpoint;
  std::string ignored;
  const auto profile = plan::resolve_model_profile(options.model, &ignored);
  if (profile && profile->ranks) return "rerank";  // refused where the endpoint is checked
  return profile && profile->pooling ? "embeddings" : "completions";
}

// What an embeddings tune cannot take: an SLO on tokens, answer lengths, a dataset.
std::optional<std::string> embeddings_problem(const TuneOptions& options, const bench::Slo& slo) {
  if (options.output_tokens_given) return "an embedding model generates nothing: drop --output-tokens";
  for (const SloLimit& limit : slo.limits) {
    if (limit.metric != "e2e") {
      return fmt::format("an embeddings answer comes in one piece, with no first token: an SLO "
                         "on {} could never be checked; limit e2e (e.g. e2e_p99=200ms)",
                         limit.metric);
    }
  }
  if (!options.dataset.empty()) {
    return "an embeddings tune sends synthetic inputs of --input-tokens: drop --dataset";
  }
  return std::nullopt;
}

std::optional<std::string> brisk_serve_space(const TuneOptions& options, const bench::Slo& slo,
                                             SearchSpace& space) {
  std::string error;
  auto base = split_command_line(options.base_flags, error);
  if (!base) return "--base-flags: " + error;
  std::vector<std::string> probe = *base;
  if (take_flag(probe, {"--port"}) || take_flag(probe, {"--host"})) {
    return "--base-flags sets --port or --host: tune starts every candidate on a free port of "
           "127.0.0.1 itself; drop them";
  }
  if (!take_flag(probe, {"--model", "-m"})) base->insert(base->begin(), {"--model", options.model});
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const bool embeddings = options.endpoint == "embeddings";
  space.serve = embeddings ? embedding_serve_knobs(*base, cores) : brisk_serve_knobs(*base, cores);
  space.knobs = space.serve.knobs;
  if (!options.verify.empty()) {
    const auto prescriptions = read_prescriptions(options.verify, error);
    if (!prescriptions) return error;
    if (prescriptions->empty()) {
      return "--verify: the doctor's report prescribes no brisk serve flag (its findings have "
             "no serve_flags): nothing to measure";
    }
    space.predicted_base = baseline_setting(space.serve.knobs);
    space.serve = ServeKnobs{*base, {prescription_knob(*prescriptions)}};
    space.knobs = space.serve.knobs;
    for (const Prescription& prescription : *prescriptions) {
      space.verify.push_back({{"prescription", prescription.finding}});
    }
  }
  if (embeddings) {
    space.serve.longest_request_tokens = options.input_tokens.longest();
    space.refusal = [&serve = space.serve](const Setting& setting) {
      return batch_tokens_refusal(serve, setting);
    };
  } else if (options.dataset.empty()) {
    space.serve.longest_request_tokens =
        options.input_tokens.longest() + options.output_tokens.longest();
  }
  space.servers = std::make_unique<BriskServeFactory>(space.serve);
  if (embeddings) {
    std::cerr << "note: no predictions (brisk plan does not model an embedding model's "
                 "batcher): every candidate is measured\n";
    return std::nullopt;
  }
  space.prediction = GoodputPrediction::make(
      options.model, options.device, static_cast<int>(std::lround(options.input_tokens.mean())),
      static_cast<int>(std::lround(options.output_tokens.mean())), slo.limits, error);
  if (!space.prediction) {
    std::cerr << "note: no predictions (" << error << "): every candidate is measured\n";
  }
  return std::nullopt;
}

std::optional<std::string> template_space(const TuneOptions& options, SearchSpace& space) {
  std::string error;
  if (!options.emit.empty()) {
    return "--emit writes brisk serve deployments: it does not go with --server-cmd";
  }
  if (!options.verify.empty()) {
    return "--verify measures brisk doctor's brisk serve flags: it does not go with --server-cmd";
  }
  auto server = parse_server_template(options.server_cmd, error);
  if (!server) return error;
  auto knobs = parse_grid(options.grid, *server, error);
  if (!knobs) return error;
  space.knobs = std::move(*knobs);
  space.servers =
      std::make_unique<TemplateFactory>(std::move(*server), options.model, options.server_cmd);
  return std::nullopt;
}

// The prediction of a setting: its knobs' values, or those a --verify prescription sets.
PredictFn prediction_of(const SearchSpace& space) {
  if (!space.prediction) return {};
  if (space.verify.empty()) {
    return [&space](const Setting& setting) { return space.prediction->predict(setting); };
  }
  return [&space](const Setting& setting) -> std::optional<double> {
    Setting predicted = space.predicted_base;
    const Knob& knob = space.knobs.front();
    if (const KnobValue* value = knob.find(setting.at(knob.name))) {
      for (const auto& [name, flag_value] : flags_as_setting(value->args)) {
        predicted[name] = flag_value;
      }
    }
    return space.prediction->predict(predicted);
  };
}

// The winner as Kubernetes manifests or an HAProxy backend (brisk plan's emitters), with the
// measurement in their header.
std::optional<std::string> emitted(const TuneOptions& options, const TuneReport& report,
                                   std::string& error) {
  const ResolveResult model = ModelStore::from_environment().resolve(options.model);
  if (!model.ok()) {
    error = "--emit: " + model.error;
    return std::nullopt;
  }
  const Candidate& best = report.search.candidates[report.search.best];
  auto words = split_command_line(best.command, error);
  if (!words) return std::nullopt;
  plan::MeasuredServe measured;
  measured.model_file = model.path.filename().string();
  measured.served_model_name = model.served_name;
  measured.serve_flags.assign(words->begin() + std::min<size_t>(2, words->size()), words->end());
  take_flag(measured.serve_flags, {"--model", "-m"});
  if (const auto name = take_flag(measured.serve_flags, {"--served-model-name"})) {
    measured.served_model_name = *name;
  }
  measured.max_seqs = 16;
  if (const auto it = best.setting.find("max-seqs"); it != best.setting.end()) {
    measured.max_seqs = std::max(1, std::atoi(it->second.c_str()));
  }
  measured.peak_memory_bytes = best.peak_memory_bytes;
  measured.gpu = std::find(words->begin(), words->end(), "--gpu-layers") != words->end() ||
                 std::find(words->begin(), words->end(), "--n-gpu-layers") != words->end();
  measured.comments = {
      fmt::format("{} on {}: goodput {:.3g} req/s within {} ({:.2f}x the baseline's {:.3g})",
                  report.server, report.model, best.goodput_rps(), report.slo,
                  report.search.candidates.front().goodput_rps() > 0
                      ? best.goodput_rps() / report.search.candidates.front().goodput_rps()
                      : 0.0,
                  report.search.candidates.front().goodput_rps()),
      "measured: " + best.command,
      fmt::format("peak resident memory {:.0f} MiB", best.peak_memory_bytes / (1 << 20))};
  return options.emit == "k8s" ? plan::kubernetes_manifests(measured)
                               : plan::haproxy_backend(measured);
}

// What one rate trial sends and why, and how long it takes at the baseline's predicted goodput:
// a p99 needs 100 requests, and at a low rate a budget holds few such trials.
std::string trial_length_note(const TuneOptions& options, const bench::Slo& slo,
                              std::optional<double> baseline_rps) {
  const TrialResolution resolution = requests_to_resolve(slo);
  std::string note = fmt::format("each rate trial sends {} requests", options.requests_per_run);
  if (!resolution.limit.empty()) {
    note += fmt::format(" ({} needs {})", resolution.limit, resolution.requests);
  }
  if (baseline_rps && *baseline_rps > 0) {
    const double trial_s = options.requests_per_run / *baseline_rps;
    note += fmt::format(": about {} at the baseline's predicted {:.3g} req/s; the budget holds "
                        "about {} such trials",
                        format_duration(std::round(trial_s)), *baseline_rps,
                        static_cast<int>(options.budget_s / trial_s));
  }
  return note;
}

void print_result(const TuneReport& report) {
  std::cout << ranked_table(report) << "\n";
  for (const std::string& line : why_it_wins(report)) std::cout << "- " << line << "\n";
  const Candidate& best = report.search.candidates[report.search.best];
  std::cout << "\nbest: " << best.command << "\n";
}

// The search for options whose endpoint is resolved and whose SLO is parsed.
int run_tune_resolved(const TuneOptions& options, const bench::Slo& slo) {
  std::string error;
  if (!options.base_flags.empty() && !options.server_cmd.empty()) {
    return fail("--base-flags are brisk serve's; --server-cmd starts another server: give one");
  }
  if (options.server_cmd.empty() && !options.grid.empty()) {
    return fail("--grid lists the values of --server-cmd's placeholders: give --server-cmd too");
  }
  SearchSpace space;
  if (const auto problem = options.server_cmd.empty() ? brisk_serve_space(options, slo, space)
                                                      : template_space(options, space)) {
    return fail(*problem);
  }

  TuneReport report;
  report.server = space.servers->name();
  report.model = options.model;
  report.slo = options.slo;
  report.endpoint = options.endpoint;
  report.budget_s = options.budget_s;
  report.requests_per_run = options.requests_per_run;
  report.knobs = space.knobs;
  if (space.prediction) {
    report.prediction_origin = space.prediction->origin();
    report.unpredicted_limits = space.prediction->unpredicted();
  }

  bench::stop_servers_on_signals();
  Budget budget(options.budget_s, steady_seconds);
  CandidateMeasurer measurer(options, slo, *space.servers, report.knobs, budget);
  SearchOptions search;
  search.refusal = space.refusal;
  search.margin = options.margin;
  search.measure_top = options.measure_top;
  search.confirm_top = options.confirm_top;
  search.confirm_repeats = options.confirm_repeats;
  std::cerr << fmt::format("brisk tune: {} on {}, SLO {}, budget {}, {}\n", report.server,
                           options.model, options.slo, format_duration(options.budget_s),
                           space.verify.empty()
                               ? fmt::format("{} knobs", report.knobs.size())
                               : fmt::format("{} prescriptions to verify", space.verify.size()));
  const Setting baseline = baseline_setting(report.knobs);
  const MeasureFn measure = [&](const Setting& setting, const GoodputSearchOptions& goodput,
                                Candidate& candidate) {
    return measurer.measure(setting, goodput, candidate);
  };
  int index = 0;
  const EventFn on_event = [&](const std::string& stage, const Setting& setting) {
    std::cerr << fmt::format("[{} left] candidate {} ({}): {}\n",
                             format_duration(std::max(0.0, std::round(budget.left_s()))), ++index,
                             stage, describe_change(report.knobs, baseline, setting));
  };
  const PredictFn predict = prediction_of(space);
  std::cerr << trial_length_note(options, slo, predict ? predict(baseline) : std::nullopt) << "\n";
  report.search = space.verify.empty()
                      ? search_configurations(report.knobs, baseline, predict, measure, budget,
                                              search, on_event)
                      : measure_each(space.verify, baseline, predict, measure, budget, search,
                                     on_event);
  report.elapsed_s = budget.elapsed_s();
  report.workload = measurer.workload_description();

  print_result(report);
  if (!options.out_dir.empty()) {
    if (!write_report_files(report, options.out_dir, error)) return fail(error);
    std::cerr << "wrote " << options.out_dir << "/report.json and report.md\n";
  }
  if (!options.emit.empty()) {
    const auto deployment = emitted(options, report, error);
    if (!deployment) return fail(error);
    std::cout << "\n" << *deployment;
    if (!options.out_dir.empty()) {
      const std::string file = options.emit == "k8s" ? "k8s.yaml" : "haproxy.cfg";
      std::ofstream(std::filesystem::path(options.out_dir) / file) << *deployment;
      std::cerr << "wrote " << options.out_dir << "/" << file << "\n";
    }
  }
  const Candidate& measured_baseline = report.search.candidates.front();
  return measured_baseline.measured() && !measured_baseline.measurements.front().trials.empty()
             ? 0
             : 1;
}

}  // namespace

int run_tune(const TuneOptions& options) {
  std::string error;
  if (options.slo.empty()) {
    return fail("--slo is required: the limits a configuration must meet, e.g. "
                "ttft_p99=2s,tpot_p99=200ms");
  }
  const auto slo = bench::parse_slo(options.slo, error);
  if (!slo) return fail("--slo: " + error);
  TuneOptions resolved = options;
  const TrialResolution resolution = requests_to_resolve(*slo);
  if (options.requests_per_run == 0) {
    resolved.requests_per_run = std::max(TuneOptions::kDefaultRequestsPerRun, resolution.requests);
  } else if (options.requests_per_run < resolution.requests) {
    return fail(fmt::format(
        "--requests-per-run {} cannot resolve {}: a trial needs at least {} requests for it (with "
        "fewer it is the one slowest request's latency, and one clump of arrivals decides the "
        "trial); give --requests-per-run {} or more, leave it out (tune then sends {}), or limit "
        "a lower percentile or the max",
        options.requests_per_run, resolution.limit, resolution.requests, resolution.requests,
        resolution.requests));
  }
  resolved.endpoint = resolved_endpoint(options);
  if (resolved.endpoint == "rerank") {
    return fail("--model is a reranker: brisk tune searches completion and embedding servers, "
                "not /v1/rerank yet; measure one with brisk bench --endpoint rerank");
  }
  if (resolved.endpoint == "embeddings") {
    if (const auto problem = embeddings_problem(resolved, *slo)) return fail(*problem);
  } else if (options.inputs_per_request != 1) {
    return fail("--inputs-per-request is for embeddings (--endpoint embeddings, or an embedding "
                "--model)");
  }
  return run_tune_resolved(resolved, *slo);
}

}  // namespace brisk::tune
