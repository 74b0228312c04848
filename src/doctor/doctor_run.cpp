#include "doctor/doctor_run.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/http_fetch.h"
#include "bench/progress.h"
#include "bench/server_process.h"
#include "bench/slo.h"
#include "bench/target_endpoint.h"
#include "bench/workload.h"
#include "common/request_trace.h"
#include "doctor/doctor_report.h"
#include "doctor/hardware_floor.h"
#include "doctor/what_if.h"
#include "doctor/probe_plan.h"
#include "doctor/probe_lengths.h"
#include "doctor/verdict.h"

namespace brisk::doctor {

namespace {

// The embeddings probe's input length without --short-input-tokens: a passage as retrieval
// pipelines cut them, short enough for every sentence-embedding model's context.
constexpr int kEmbeddingInputTokens = 64;

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

bool write_text(const std::filesystem::path& path, const std::string& text, std::string& error) {
  std::ofstream out(path);
  out << text;
  if (!out) error = "cannot write " + path.string();
  return static_cast<bool>(out);
}

// The probe's lengths: the trace's (--workload) or the defaults, then the flags given.
std::optional<ProbeLengths> probe_lengths(const DoctorOptions& options, std::string& error) {
  ProbeLengths workload;
  if (!options.workload.empty()) {
    const auto trace = read_trace_file(options.workload, TraceFormat::automatic, error);
    if (!trace) {
      error = "--workload: " + error;
      return std::nullopt;
    }
    workload = probe_lengths_from_trace(*trace, options.workload);
  }
  auto given = [&](const char* flag, const std::optional<int>& value, int& length) {
    if (!value) return;
    length = *value;
    if (workload.from_trace()) workload.flags_over_trace.push_back(flag);
  };
  given("--short-input-tokens", options.short_input_tokens, workload.short_input_tokens);
  given("--long-input-tokens", options.long_input_tokens, workload.long_input_tokens);
  return workload;
}

// --endpoint: as given, or embeddings (rerank) where the server says the model is an embedding
// model (a reranker).
bench::ApiKind probe_endpoint(const DoctorOptions& options, const bench::TargetEndpoint& target,
                              const std::string& model) {
  if (options.endpoint == "embeddings") return bench::ApiKind::embeddings;
  if (options.endpoint == "rerank") return bench::ApiKind::rerank;
  if (options.endpoint == "completions") return bench::ApiKind::completions;
  const std::string kind = bench::served_model_kind(target, model, std::chrono::seconds(10));
  if (kind == "reranker") return bench::ApiKind::rerank;
  return kind == "embedding" ? bench::ApiKind::embeddings : bench::ApiKind::completions;
}

}  // namespace

int run_doctor(const DoctorOptions& options) {
  if (options.budget_s <= 0) return fail("--budget must be a positive number of seconds");
  if (options.max_concurrency < 1) return fail("--max-concurrency must be at least 1");
  std::optional<bench::Slo> slo;
  std::string error;
  if (!options.slo.empty()) {
    slo = bench::parse_slo(options.slo, error);
    if (!slo) return fail("--slo: " + error);
  }
  const std::optional<ProbeLengths> workload = probe_lengths(options, error);
  if (!workload) return fail(error);
  if (!options.out_dir.empty()) {
    std::error_code fs_error;
    std::filesystem::create_directories(options.out_dir, fs_error);
    if (fs_error) return fail("--out " + options.out_dir + ": " + fs_error.message());
  }
  std::unique_ptr<bench::ServerProcess> child;
  std::string url = options.url;
  if (url.empty()) {
    std::vector<std::string> serve_args = options.serve_args;
    if (serve_args.empty()) serve_args = {"--model", "gemma3-270m"};
    std::cerr << "brisk doctor: no --url, starting brisk serve "
              << fmt::format("{}", fmt::join(serve_args, " ")) << "\n";
    bench::ServerLaunch launch = bench::brisk_serve_launch(serve_args, "doctor-serve");
    launch.ready_timeout_s = 180;
    child = std::make_unique<bench::ServerProcess>(std::move(launch), error);
    if (!child->running()) return fail(error);
    url = child->url();
  }
  auto target = bench::parse_target_url(url, error);
  if (!target) return fail("--url: " + error);
  target->api_key = options.api_key;
  std::string model = options.model;
  if (model.empty()) {
    auto served = bench::first_served_model(*target, std::chrono::seconds(10), error);
    if (!served) {
      return fail(
          fmt::format("cannot reach an OpenAI-compatible server at {} ({}); check --url "
                      "(and --api-key), or pass --model",
                      target->url(), error));
    }
    model = *served;
  }
  ProbeOptions probe;
  probe.endpoint = probe_endpoint(options, *target, model);
  probe.inputs_per_request = options.inputs_per_request;
  probe.target = *target;
  probe.model = model;
  probe.budget_s = options.budget_s;
  probe.max_concurrency = options.max_concurrency;
  probe.slo = slo;
  probe.progress = bench::progress_style_for(options.progress);
  probe.server_pid = child ? child->pid() : options.server_pid;
  probe.workload = *workload;
  const bool pooling = bench::pooling_route(probe.endpoint);
  if (pooling && !options.short_input_tokens &&
      !workload->from_trace()) {
    probe.workload.short_input_tokens = kEmbeddingInputTokens;
  }
  probe.seed = options.seed;
  std::cerr << fmt::format(
      "brisk doctor: probing {} (model {}) for at most {:.0f} s; {}\n", target->url(), model,
      options.budget_s,
      probe.endpoint == bench::ApiKind::embeddings
          ? fmt::format("embeddings, {} input(s) of {} tokens a request", probe.inputs_per_request,
                        probe.workload.short_input_tokens)
      : probe.endpoint == bench::ApiKind::rerank
          ? fmt::format("rerank, a {}-token query and {} document(s) of {} tokens a request",
                        bench::kRerankQueryTokens, probe.inputs_per_request,
                        probe.workload.short_input_tokens)
          : describe_probe_lengths(*workload));
  auto outcome = run_probe(probe, error);
  if (!outcome) {
    return fail(error + (pooling ? "; check --url and that the server is up"
                             : "; check --url and that the server is up (an embedding model? pass "
                               "--endpoint embeddings)"));
  }
  Evidence& evidence = outcome->evidence;
  evidence.usd_per_hour = options.usd_per_hour;
  const std::string plan_model = options.model_file.empty() ? model : options.model_file;
  evidence.floor = find_hardware_floor(plan_model, options.device, evidence.gpu);
  Diagnosis diagnosis = diagnose(evidence);
  // Each prescription's predicted effect, on the device the floor was computed for.
  std::string no_prediction = evidence.embeddings.probed()
                                  ? "brisk plan does not model an embedding model's batcher"
                                  : evidence.floor.source;
  std::optional<WhatIfModel> what_if;
  if (!evidence.floor.device.empty() && !evidence.embeddings.probed()) {
    what_if = what_if_model(plan_model, evidence.floor.device, no_prediction);
  }
  predict_effects(evidence, what_if, no_prediction, diagnosis.findings);
  const std::string markdown = markdown_report(evidence, diagnosis);
  std::cout << markdown << std::flush;
  if (!options.out_dir.empty()) {
    const std::filesystem::path dir(options.out_dir);
    if (!write_text(dir / "report.md", markdown, error) ||
        !write_text(dir / "report.json", report_json(evidence, diagnosis).dump(2) + "\n", error) ||
        !write_doctor_html(evidence, diagnosis, outcome->timeline, dir / "report.html", error)) {
      return fail(error);
    }
    std::cerr << "brisk doctor: wrote " << (dir / "report.md").string()
              << ", report.json, report.html\n";
  }
  return 0;
}

}  // namespace brisk::doctor
