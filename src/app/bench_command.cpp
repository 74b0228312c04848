#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/bench_flags.h"
#include "app/commands.h"
#include "bench/bench_report.h"
#include "bench/chat_session.h"
#include "bench/html_report.h"
#include "bench/http_fetch.h"
#include "bench/length_distribution.h"
#include "bench/load_runner.h"
#include "bench/progress.h"
#include "bench/rate_search.h"
#include "bench/result_comparison.h"
#include "bench/server_scrape.h"
#include "bench/run_statistics.h"
#include "bench/slo.h"
#include "bench/trace_workload.h"
#include "bench/workload.h"
#include "bench/workload_builder.h"
#include "bench/workload_preset.h"
#include "common/json_file.h"
#include "telemetry/prometheus_text.h"
#include "telemetry/server_metrics.h"

namespace brisk {

namespace {

// One line for the terminal about what the server counted during a load point.
std::string server_delta_line(const nlohmann::json& delta) {
  std::string line = "  server (" + delta["dialect"].get<std::string>() + " /metrics):";
  if (delta["prefix_cache_hit_rate"].is_number()) {
    line += fmt::format(" prefix cache {:.0f}% of {:.0f} prompt tokens reused;",
                        delta["prefix_cache_hit_rate"].get<double>() * 100,
                        delta["prefix_cache_query_tokens"].get<double>());
  }
  if (delta["preemptions"].is_number()) {
    line += fmt::format(" {:.0f} preemptions;", delta["preemptions"].get<double>());
  }
  if (delta["rejections"].is_object()) {
    line += delta["rejections"].empty() ? " no rejections"
                                        : " rejections " + delta["rejections"].dump();
  }
  return line + "\n";
}

int run_compare(const BenchFlags& flags) {
  std::string error;
  auto first = read_json_file(flags.compare[0], error);
  auto second = first ? read_json_file(flags.compare[1], error) : std::nullopt;
  std::string table;
  if (first && second) {
    table = bench::compare_results(*first, *second, flags.compare[0], flags.compare[1], error);
  }
  if (!error.empty()) {
    std::cerr << "error: " << error << "\n";
    return 2;
  }
  std::cout << table;
  return 0;
}

// The first model the server lists: what a single-model server is serving.
// A few distinct failure messages, so a broken setup (wrong model, auth) is obvious at once.
void print_failure_samples(const bench::RunResult& run) {
  std::map<std::string, int> seen;
  for (const bench::RequestRecord& record : run.records) {
    if (record.ok() || seen.size() >= 3 || seen.count(record.error_detail)) continue;
    seen[record.error_detail] = 1;
    std::cerr << fmt::format("  {} (request {}): {}\n", bench::error_name(record.error),
                             record.index, record.error_detail);
  }
}

// Flags that cannot be combined, with what to change; empty when the combination is fine.
std::string conflicting_flags(const BenchFlags& flags) {
  const bool has_rate = !flags.rates.empty() || flags.find_max_rate;
  if (!flags.dataset.empty() && !flags.sharegpt.empty()) {
    return "--dataset and --sharegpt both name the prompts to send: keep one";
  }
  if (!flags.preset.empty() && (has_rate || !flags.dataset.empty() || !flags.sharegpt.empty())) {
    return "--preset sets the load points and prompts itself: drop --rate, --find-max-rate, "
           "--dataset and --sharegpt (or drop --preset)";
  }
  if (flags.duration_s && flags.find_max_rate) {
    return "--find-max-rate starts with a burst of every request at once, which needs a count: "
           "use --num-requests instead of --duration";
  }
  if (flags.no_stream && !flags.slo.empty()) {
    std::string ignored;  // a malformed --slo is reported where it is parsed
    for (const SloLimit& limit :
         parse_slo_limits(flags.slo, ignored).value_or(std::vector<SloLimit>{})) {
      if (limit.metric != "e2e") {
        return fmt::format(
            "--no-stream measures no first token, so no TTFT, TPOT or ITL: an SLO on {} could "
            "never be checked; limit e2e instead, or stream",
            limit.metric);
      }
    }
  }
  if (flags.endpoint == "embeddings" || flags.endpoint == "rerank") {
    const std::string& endpoint = flags.endpoint;
    if (!flags.dataset.empty() || !flags.sharegpt.empty() || !flags.preset.empty() ||
        !flags.sessions.empty()) {
      return "--endpoint " + endpoint +
             " sends synthetic inputs of --input-tokens: drop --dataset, --sharegpt, --preset "
             "and --sessions";
    }
    if (flags.output_tokens_given) {
      return "--endpoint " + endpoint + " generates nothing: drop --output-tokens";
    }
    if (!flags.sampling.sent_sampling().empty()) {
      return "--endpoint " + endpoint + " samples nothing: drop the sampling flags";
    }
    std::string ignored;  // a malformed --slo is reported where it is parsed
    for (const SloLimit& limit :
         parse_slo_limits(flags.slo, ignored).value_or(std::vector<SloLimit>{})) {
      if (limit.metric != "e2e") {
        return fmt::format(
            "{} answer has no first token: an SLO on {} could never be checked; limit e2e",
            endpoint == "rerank" ? "a rerank" : "an embeddings", limit.metric);
      }
    }
  } else if (flags.inputs_per_request != 1) {
    return "--inputs-per-request is for --endpoint embeddings or rerank";
  }
  for (const std::string& rate : flags.rates) {
    if (flags.duration_s && rate == "inf") {
      return "--rate inf sends every request at once, which needs a count: use --num-requests "
             "instead of --duration";
    }
  }
  return {};
}

// What the terminal header says was sampled, so every printed result states it.
std::string sampling_summary(const bench::SamplingOptions& sampling) {
  const nlohmann::json sent = sampling.sent_sampling();
  std::string summary = sent.empty() ? "sampling={} (server defaults)" : "sampling=" + sent.dump();
  if (!sampling.extra_body.empty()) summary += " extra_body=" + sampling.extra_body.dump();
  return summary;
}

int run_bench(const BenchFlags& flags) {
  if (!flags.compare.empty()) return run_compare(flags);
  std::string error = conflicting_flags(flags);
  if (!error.empty()) {
    std::cerr << "error: " << error << "\n";
    return 2;
  }
  const auto sampling = bench::complete_sampling_options(flags.sampling, flags.extra_body, error);
  if (!sampling) {
    std::cerr << "error: " << error << "\n";
    return 2;
  }
  std::optional<std::vector<bench::PresetCase>> preset_cases;
  if (!flags.preset.empty()) {
    preset_cases = bench::parse_workload_preset(flags.preset, error);
    if (!preset_cases) {
      std::cerr << "error: --preset: " << error << "\n";
      return 2;
    }
  }
  auto target = bench::parse_target_url(flags.url, error);
  if (!target) {
    std::cerr << "error: " << error << "\n";
    return 2;
  }
  target->api_key = flags.api_key;
  const auto setup_timeout = std::chrono::milliseconds(10'000);
  const auto request_timeout = std::chrono::milliseconds(static_cast<long>(flags.timeout_s * 1000));

  std::string model = flags.model;
  if (model.empty()) {
    auto discovered = bench::first_served_model(*target, setup_timeout, error);
    if (!discovered) {
      std::cerr << "error: cannot find the model to use (" << error << "); pass --model\n";
      return 2;
    }
    model = *discovered;
  }

  const bench::TokenCalibration calibration =
      bench::calibrate_tokens(*target, model, setup_timeout);
  bench::WorkloadSpec spec;
  spec.kind = flags.endpoint == "chat"         ? bench::ApiKind::chat
              : flags.endpoint == "embeddings" ? bench::ApiKind::embeddings
              : flags.endpoint == "rerank"     ? bench::ApiKind::rerank
                                               : bench::ApiKind::completions;
  spec.inputs_per_request = flags.inputs_per_request;
  spec.model = model;
  spec.input_tokens = *bench::parse_length_distribution(flags.input_tokens, error);
  spec.output_tokens = *bench::parse_length_distribution(flags.output_tokens, error);
  spec.output_tokens_given = flags.output_tokens_given;
  spec.jsonl_path = flags.dataset;
  spec.sharegpt_path = flags.sharegpt;
  spec.sharegpt_wanted = flags.duration_s ? 1000 : flags.warmup_requests + flags.num_requests;
  spec.seed = flags.seed;
  spec.stream = !flags.no_stream && !bench::pooling_route(spec.kind);
  spec.sampling = *sampling;

  // One shared workload, or one per preset case (each then its own load point).
  std::vector<bench::BuiltWorkload> workloads;
  nlohmann::json workload_description;
  // --trace: one open-loop run on the trace's own arrivals (or its conversations).
  std::optional<bench::TraceReplay> replay;
  std::optional<bench::SessionSpec> session_spec;
  if (!flags.trace.empty()) {
    const bench::TraceReplayOptions replay_options{flags.time_scale, flags.max_duration_s};
    replay = bench::build_trace_replay(flags.trace, *parse_trace_format(flags.trace_format),
                                       replay_options, spec, flags.warmup_requests, *target,
                                       calibration, setup_timeout, error);
    if (!replay) {
      std::cerr << "error: --trace: " << error << "\n";
      return 2;
    }
    workload_description = replay->built.description;
    if (flags.replay_sessions) {
      workload_description["replay"] = "sessions";
      workload_description["endpoint"] = "chat";
      workload_description["prompt"] =
          "chat messages of filler words (approximate lengths: the chat template and this "
          "server's answers decide the history)";
    }
  } else if (!flags.sessions.empty()) {
    session_spec = bench::SessionSpec{0,
                                      flags.turns,
                                      *bench::parse_think_time(flags.think_time, error),
                                      spec.input_tokens,
                                      spec.output_tokens,
                                      flags.system_tokens,
                                      flags.seed};
    workload_description = bench::describe_sessions(*session_spec, spec.kind);
    workload_description["sessions"] = flags.sessions;  // one load point each
    workload_description["tokenizer"] = bench::tokenizer_api_name(calibration.api);
  } else if (preset_cases) {
    workloads =
        bench::build_preset_workloads(spec, *preset_cases, *target, calibration, setup_timeout);
    workload_description = {{"source", "preset"}, {"preset", flags.preset}, {"seed", flags.seed}};
  } else {
    auto built = bench::build_workload(spec, *target, calibration, setup_timeout, error);
    if (!built) {
      std::cerr << "error: " << error << "\n";
      return 2;
    }
    workload_description = built->description;
    workloads.push_back(std::move(*built));
  }
  std::cerr << fmt::format("brisk bench: {} model={} endpoint={}{} {}\n", target->url(), model,
                           flags.endpoint, preset_cases ? " preset=" + flags.preset : "",
                           sampling_summary(*sampling));
  for (const bench::BuiltWorkload& built : workloads) std::cerr << built.summary << "\n";
  if (replay) std::cerr << replay->built.summary << "\n";
  if (session_spec) {
    std::cerr << fmt::format(
        "sessions: {} turns each, think time {} s, system prompt {} tokens, each new message {} "
        "tokens ({:.2f} tokens per filler word, {}), answers {} tokens\n",
        session_spec->turns, session_spec->think.spec(), session_spec->system_tokens,
        session_spec->user_tokens.spec(), calibration.tokens_per_word,
        calibration.measured() ? "measured" : "assumed", session_spec->output_tokens.spec());
  }
  const int measured_requests =
      replay ? static_cast<int>(replay->schedule.records.size()) : flags.num_requests;
  workload_description["num_requests"] = flags.duration_s || session_spec
                                             ? nlohmann::json(nullptr)
                                             : nlohmann::json(measured_requests);
  workload_description["duration_s"] =
      flags.duration_s ? nlohmann::json(*flags.duration_s) : nlohmann::json(nullptr);
  workload_description["sampling"] = sampling->sent_sampling();
  workload_description["extra_body"] = sampling->extra_body;

  bench::BenchReport report{{flags.url, flags.endpoint, model},
                            workload_description,
                            flags.usd_per_hour,
                            {},
                            std::nullopt,
                            std::nullopt};
  std::optional<bench::Slo> slo;
  if (!flags.slo.empty()) {
    slo = bench::parse_slo(flags.slo, error);
    if (!slo) {
      std::cerr << "error: --slo: " << error << "\n";
      return 2;
    }
    report.slo = *slo;
  }
  auto open_point = [&](double rate) {
    bench::LoadPoint point;
    point.concurrency = flags.max_concurrency;
    point.rate = rate;
    point.arrival = flags.arrival == "constant" ? bench::ArrivalProcess::constant
                    : flags.arrival == "gamma"  ? bench::ArrivalProcess::gamma
                                                : bench::ArrivalProcess::poisson;
    point.burstiness = flags.burstiness;
    return point;
  };
  int total_ok = 0;
  const bench::ProgressStyle progress_style = bench::progress_style_for(flags.progress);
  // Runs one load point: `workload`'s requests, or `sessions` (a session run) when not null.
  auto run_workload_point = [&](const bench::LoadPoint& load, const bench::Workload* workload,
                                const std::vector<bench::SessionScript>* sessions,
                                nlohmann::json case_description) -> const bench::RunStatistics& {
    const int index = static_cast<int>(report.runs.size());
    int requests = measured_requests;
    if (sessions) {
      requests = 0;
      for (const bench::SessionScript& script : *sessions) requests += script.turns.size();
    }
    bench::RunOptions options{
        load, index, requests, flags.duration_s, flags.warmup_requests, request_timeout};
    if (load.trace && !sessions) options.schedule_s = replay->schedule.offsets_s;
    const std::string amount = flags.duration_s ? fmt::format("{:g} s", *flags.duration_s)
                                                : fmt::format("{} requests", requests);
    std::cerr << fmt::format(
        "run {}: {}, {} (+{} warmup)...\n", index,
        sessions && load.trace
            ? fmt::format("the trace's {} conversations from their arrivals", load.sessions)
        : sessions         ? fmt::format("{} conversations", load.sessions)
        : load.trace       ? fmt::format("the trace's arrivals, {:.3g} req/s on average", load.rate)
        : load.open_loop() ? fmt::format("rate {:g} req/s ({})", load.rate, flags.arrival)
                           : fmt::format("concurrency {}", load.concurrency),
        amount, flags.warmup_requests);
    bench::ProgressDisplay progress(progress_style, fmt::format("run {}", index),
                                    flags.duration_s ? 0 : requests, flags.duration_s.value_or(0));
    options.progress = &progress.counters();
    options.busy_poll = flags.busy_poll;
    options.honour_retry_after = flags.retry_after == "honour";
    const auto metrics_before = bench::scrape_server_metrics(*target, model);
    bench::RunResult run =
        sessions           ? bench::run_sessions(*target, *sessions,
                                                 {load.trace ? bench::ApiKind::chat : spec.kind, model,
                                                  spec.stream, *sampling},
                                                 options)
        : load.open_loop() ? bench::run_open_loop(*target, *workload, options, flags.seed + index)
                           : bench::run_closed_loop(*target, *workload, options);
    progress.stop();
    if (sessions) {
      const int unsent = requests - static_cast<int>(std::count_if(
                                        run.records.begin(), run.records.end(),
                                        [](const bench::RequestRecord& r) { return !r.warmup; }));
      if (unsent > 0) {
        std::cerr << fmt::format(
            "  note: {} turns were not sent: an earlier turn of their conversation failed\n",
            unsent);
      }
    }
    const auto metrics_after = metrics_before ? bench::scrape_server_metrics(*target, model) : std::nullopt;
    nlohmann::json server_delta = nullptr;
    if (metrics_before && metrics_after && metrics_before->dialect == metrics_after->dialect) {
      server_delta = telemetry::server_metrics_delta(*metrics_before, *metrics_after);
      std::cerr << server_delta_line(server_delta);
    }
    bench::RunStatistics stats = bench::compute_run_statistics(
        run.records, run.start, run.end,
        load.open_loop() ? bench::LatencyOrigin::scheduled : bench::LatencyOrigin::sent,
        slo ? &*slo : nullptr);
    if (stats.failed > 0) print_failure_samples(run);
    if (stats.itl_ms.count > 0 && stats.itl_same_read_gaps * 100 >= int(stats.itl_ms.count)) {
      std::cerr << fmt::format(
          "  note: {} of {} ITL samples are 0 ms: those chunks came in one socket read (the "
          "server wrote them back to back); they stay in ITL (itl_same_read_gaps)\n",
          stats.itl_same_read_gaps, stats.itl_ms.count);
    }
    if (stats.requests_without_usage > 0) {
      std::cerr << fmt::format(
          "  note: the server reported no usage for {} of {} requests (it ignores "
          "stream_options.include_usage?): their output tokens are counted as content chunks and "
          "their input tokens not at all\n",
          stats.requests_without_usage, stats.ok);
    }
    total_ok += stats.ok;
    report.runs.push_back(
        {std::move(run), std::move(stats), std::move(case_description), std::move(server_delta)});
    return report.runs.back().stats;
  };
  auto run_point = [&](const bench::LoadPoint& load) -> const bench::RunStatistics& {
    return run_workload_point(load, workloads.front().workload.get(), nullptr, nullptr);
  };

  if (replay) {
    bench::LoadPoint point;
    point.concurrency = flags.max_concurrency;
    point.trace = true;
    const double span_s = replay->schedule.offsets_s.back();
    point.rate = span_s > 0 ? static_cast<double>(replay->schedule.offsets_s.size()) / span_s
                            : std::numeric_limits<double>::infinity();
    if (flags.replay_sessions) {
      const std::vector<bench::SessionScript> conversations =
          bench::trace_sessions(replay->schedule, flags.time_scale, *replay->prompts);
      point.sessions = static_cast<int>(conversations.size());
      run_workload_point(point, nullptr, &conversations, nullptr);
    } else {
      run_workload_point(point, replay->built.workload.get(), nullptr, nullptr);
    }
  } else if (session_spec) {
    for (const int count : flags.sessions) {
      bench::SessionSpec one = *session_spec;
      one.sessions = count;
      const std::vector<bench::SessionScript> conversations =
          bench::synthetic_sessions(one, calibration, static_cast<int>(report.runs.size()));
      bench::LoadPoint point{count};
      point.sessions = count;
      run_workload_point(point, nullptr, &conversations, nullptr);
    }
  } else if (preset_cases) {
    for (size_t i = 0; i < preset_cases->size(); ++i) {
      run_workload_point(bench::LoadPoint{(*preset_cases)[i].concurrency},
                         workloads[i].workload.get(), nullptr, workloads[i].description);
    }
  } else if (flags.find_max_rate) {
    if (!slo) {
      std::cerr << "error: --find-max-rate needs --slo (the limits the rate must still meet)\n";
      return 2;
    }
    const bench::RateSearch search = bench::find_max_rate(
        *slo, flags.search_steps, [&](double rate) { return run_point(open_point(rate)); },
        [](const bench::RateTrial& trial) {
          if (std::isinf(trial.rate)) return;
          std::cerr << fmt::format(
              "  rate {:.3g} req/s: {}\n", trial.rate,
              trial.meets() ? std::string("meets the SLO")
                            : "misses: " + fmt::format("{}", fmt::join(trial.misses, ", ")));
        });
    if (!search.stopped.empty()) std::cerr << "  --find-max-rate stops: " << search.stopped << "\n";
    report.max_rate_meeting_slo = search.max_rate;
  } else if (!flags.rates.empty()) {
    for (const std::string& rate : flags.rates) {
      run_point(
          open_point(rate == "inf" ? std::numeric_limits<double>::infinity() : std::stod(rate)));
    }
  } else {
    for (int users : flags.concurrency) run_point(bench::LoadPoint{users});
  }

  std::cout << bench::summary_table(report);
  if (!flags.out_dir.empty()) {
    if (!bench::write_report_files(report, flags.out_dir, error)) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }
    std::cerr << "wrote " << flags.out_dir << "/result.json and requests.csv\n";
    // The charts are a convenience: without Chart.js the numbers above still stand.
    if (bench::write_html_report(report, std::filesystem::path(flags.out_dir) / "report.html",
                                 error)) {
      std::cerr << "wrote " << flags.out_dir << "/report.html\n";
    } else {
      std::cerr << "warning: no report.html: " << error << "\n";
    }
  }
  return total_ok > 0 ? 0 : 1;
}

}  // namespace

CommandRunner register_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::Option* output_tokens = add_bench_flags(app, *flags);
  return [flags, output_tokens] {
    flags->output_tokens_given = output_tokens->count() > 0;
    return run_bench(*flags);
  };
}

}  // namespace brisk
