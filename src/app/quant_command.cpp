#include <filesystem>
#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "bench/progress.h"
#include "common/log.h"
#include "common/model_store.h"
#include "quant/candidate_maker.h"
#include "quant/dataset.h"
#include "quant/default_dataset.h"
#include "quant/endpoint_run.h"
#include "quant/gates.h"
#include "quant/quant_report.h"
#include "quant/quant_run.h"

namespace brisk {
namespace {

namespace fs = std::filesystem;

struct QuantFlags {
  std::string reference;
  std::vector<std::string> candidates;
  std::string reference_url;
  std::vector<std::string> candidate_urls;
  std::string reference_model;
  std::vector<std::string> candidate_models;
  std::string api_key;
  int top_logprobs = 20;
  std::string make;
  bool allow_requantize = false;
  std::string work_dir;
  std::string dataset;
  int limit = 0;
  int max_tokens = 48;
  int ctx_size = 4096;
  int concurrency = 4;
  int concurrent_tokens = 16;
  int threads = 0;
  std::string gates = quant::kDefaultGates;
  std::string prefer = "speed";
  std::string text;
  int text_ctx = 512;
  int text_chunks = -1;
  std::string out;
  bool json = false;
  std::string progress = "auto";
  // llama.cpp warns about model quirks at every load; brisk quant loads many models.
  std::string log_level = "error";
};

int fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

std::optional<std::vector<quant::DatasetItem>> dataset_items(const QuantFlags& flags,
                                                             std::string* error) {
  auto items = flags.dataset.empty()
                   ? quant::parse_dataset(std::string(quant::default_dataset_jsonl()),
                                          "the built-in dataset", error)
                   : quant::load_dataset(flags.dataset, error);
  if (items && flags.limit > 0 && static_cast<int>(items->size()) > flags.limit) {
    items->resize(static_cast<size_t>(flags.limit));
  }
  return items;
}

fs::path work_dir_for(const QuantFlags& flags) {
  if (!flags.work_dir.empty()) return flags.work_dir;
  if (!flags.out.empty()) return fs::path(flags.out) / "models";
  return ModelStore::from_environment().models_dir().parent_path() / "quant";
}

// Candidates named after their files, made ones after their type; a repeated name gets a suffix
// so report rows stay distinct.
std::string unique_name(std::string name, const std::vector<quant::CandidateFile>& taken) {
  const std::string base = name;
  for (int suffix = 2;; ++suffix) {
    bool clash = false;
    for (const auto& candidate : taken) clash = clash || candidate.name == name;
    if (!clash) return name;
    name = base + "-" + std::to_string(suffix);
  }
}

quant::QuantSettings settings_of(const QuantFlags& flags) {
  return {flags.ctx_size, flags.max_tokens, flags.concurrency,
          flags.threads,  flags.prefer,     flags.dataset.empty() ? "(built-in)" : flags.dataset,
          flags.text,     flags.text_ctx};
}

int print_report(const QuantFlags& flags, const quant::QuantReport& report) {
  if (flags.json) {
    std::cout << quant::report_json(report).dump(2) << "\n";
  } else {
    quant::print_report_table(std::cout, report);
  }
  if (!flags.out.empty()) {
    std::string error;
    if (!quant::write_report_files(report, flags.out, &error)) return fail(error);
    std::cerr << "wrote " << (fs::path(flags.out) / "report.{json,md,html}").string() << "\n";
  }
  return 0;
}

// A file reference with URL candidates (or the reverse) is refused: the in-process mode
// compares full logits, the endpoint mode only what a server returns, so one report cannot
// mix them honestly.
std::optional<std::string> mixed_mode_error(const QuantFlags& flags) {
  const bool any_url = !flags.reference_url.empty() || !flags.candidate_urls.empty();
  if (!any_url) return std::nullopt;
  if (!flags.reference.empty() && !flags.reference_url.empty()) {
    return "give --reference FILE or --reference-url URL, not both";
  }
  if (flags.reference_url.empty()) {
    return "--candidate-url needs --reference-url: a file reference and endpoint candidates "
           "cannot be compared (serve the reference, e.g. `brisk serve --model FILE`, and give "
           "its URL)";
  }
  if (!flags.candidates.empty() || !flags.make.empty()) {
    return "--reference-url compares endpoints only: give the candidates with --candidate-url "
           "(serve a file with `brisk serve --model FILE`), not --candidate or --make";
  }
  if (flags.candidate_urls.empty()) return "give at least one --candidate-url URL";
  if (!flags.text.empty()) return "--text needs files: an endpoint cannot be teacher-forced";
  if (flags.prefer == "memory") {
    return "--prefer memory needs files: memory is not measurable over HTTP";
  }
  if (flags.candidate_models.size() > 1 &&
      flags.candidate_models.size() != flags.candidate_urls.size()) {
    return "give one --candidate-model for all candidates, or one per --candidate-url";
  }
  if (flags.top_logprobs < 1) return "--top-logprobs must be at least 1";
  return std::nullopt;
}

int run_endpoint_quant(const QuantFlags& flags, std::vector<quant::DatasetItem> items,
                       std::vector<quant::Gate> gates) {
  quant::EndpointRunInputs inputs;
  inputs.reference = {flags.reference_url, flags.reference_model};
  for (size_t i = 0; i < flags.candidate_urls.size(); ++i) {
    const std::string model = flags.candidate_models.empty()       ? ""
                              : flags.candidate_models.size() == 1 ? flags.candidate_models[0]
                                                                   : flags.candidate_models[i];
    inputs.candidates.push_back({flags.candidate_urls[i], model});
  }
  inputs.api_key = flags.api_key;
  inputs.items = std::move(items);
  inputs.gates = std::move(gates);
  inputs.settings = settings_of(flags);
  inputs.concurrent_tokens = flags.concurrent_tokens;
  inputs.top_logprobs = flags.top_logprobs;
  inputs.progress = bench::progress_style_for(flags.progress);
  std::string error;
  const auto report = quant::run_endpoint_quant(inputs, &error);
  if (!report) return fail(error);
  return print_report(flags, *report);
}

int run_quant(const QuantFlags& flags) {
  if (!configure_logging(LogFormat::text, flags.log_level)) {
    return fail("unknown --log-level '" + flags.log_level + "'");
  }
  if (const auto mixed = mixed_mode_error(flags)) return fail(*mixed);
  if (flags.reference.empty() && flags.reference_url.empty()) {
    return fail("give the reference: --reference FILE (or a catalog name), or --reference-url URL");
  }
  if (!flags.reference_url.empty()) {
    if (flags.max_tokens < 1 || flags.concurrency < 1 || flags.concurrent_tokens < 1) {
      return fail("--max-tokens, --concurrency and --concurrent-tokens must be positive");
    }
    std::string error;
    auto gates = quant::parse_gates(flags.gates, &error);
    if (!gates) return fail("--gate: " + error);
    auto items = dataset_items(flags, &error);
    if (!items) return fail(error);
    return run_endpoint_quant(flags, std::move(*items), std::move(*gates));
  }
  if (flags.candidates.empty() && flags.make.empty()) {
    return fail("give at least one --candidate FILE.gguf, or --make q8_0,q4_k_m,... to make them");
  }
  if (flags.prefer != "speed" && flags.prefer != "memory") {
    return fail("--prefer must be speed or memory");
  }
  if (flags.max_tokens < 1 || flags.ctx_size < 16 || flags.concurrency < 1 ||
      flags.concurrent_tokens < 1 || flags.text_ctx < 8) {
    return fail(
        "--max-tokens, --concurrency and --concurrent-tokens must be positive, "
        "--ctx-size at least 16 and --text-ctx at least 8");
  }
  std::string error;
  const ResolveResult resolved = ModelStore::from_environment().resolve(flags.reference);
  if (!resolved.ok()) return fail("--reference: " + resolved.error);
  const auto gates = quant::parse_gates(flags.gates, &error);
  if (!gates) return fail("--gate: " + error);
  auto items = dataset_items(flags, &error);
  if (!items) return fail(error);
  const auto reference_type = quant::read_file_type(resolved.path.string(), &error);
  if (!reference_type) return fail("--reference: " + error);

  quant::QuantRunInputs inputs;
  inputs.reference = resolved.path.string();
  inputs.reference_type = reference_type->name;
  // A quantized reference is a fact about the reference, whether candidates are made or given.
  inputs.reference_quantized = reference_type->quantized;
  for (const std::string& path : flags.candidates) {
    if (!fs::exists(path)) return fail("--candidate '" + path + "' does not exist");
    // Read the header now, so a wrong file fails before minutes of measuring the reference.
    if (!quant::read_file_type(path, &error)) return fail("--candidate: " + error);
    inputs.candidates.push_back(
        {unique_name(fs::path(path).stem().string(), inputs.candidates), path, ""});
  }
  if (!flags.make.empty()) {
    const auto types = quant::parse_make_types(flags.make, &error);
    if (!types) return fail(error);
    if (reference_type->quantized && !flags.allow_requantize) {
      return fail("the reference is already quantized (" + reference_type->name +
                  "); add --allow-requantize to make candidates from it (quality is then "
                  "measured against this reference, not the original weights), or give an "
                  "F16/BF16 reference");
    }
    const auto made = quant::make_candidates(inputs.reference, *types, work_dir_for(flags),
                                             flags.allow_requantize, std::cerr, &error);
    if (!made) return fail(error);
    for (const auto& candidate : *made) {
      inputs.candidates.push_back({unique_name(candidate.type, inputs.candidates),
                                   candidate.path.string(), candidate.type});
    }
  }
  inputs.items = std::move(*items);
  inputs.gates = *gates;
  inputs.settings = settings_of(flags);
  inputs.concurrent_tokens = flags.concurrent_tokens;
  inputs.text_chunks = flags.text_chunks;
  inputs.progress = bench::progress_style_for(flags.progress);

  const auto report = quant::run_quant(inputs, &error);
  if (!report) return fail(error);
  return print_report(flags, *report);
}

}  // namespace

CommandRunner register_quant_command(CLI::App& app) {
  auto flags = std::make_shared<QuantFlags>();
  app.add_option("--reference", flags->reference,
                 "The reference model: a GGUF file or a catalog name (e.g. gemma3-270m)");
  app.add_option("--candidate", flags->candidates, "A quantized GGUF to check (repeatable)");
  app.add_option("--reference-url", flags->reference_url,
                 "Compare endpoints instead: the reference's OpenAI-compatible server, "
                 "http://HOST:PORT");
  app.add_option("--candidate-url", flags->candidate_urls,
                 "A candidate's OpenAI-compatible server (repeatable; with --reference-url)");
  app.add_option("--reference-model", flags->reference_model,
                 "Model name sent to --reference-url (default: the first of GET /v1/models)");
  app.add_option("--candidate-model", flags->candidate_models,
                 "Model name sent to the candidates: once for all, or once per --candidate-url "
                 "(default: the first of each server's GET /v1/models)");
  app.add_option("--api-key", flags->api_key, "Sent to every endpoint as a Bearer token");
  app.add_option("--top-logprobs", flags->top_logprobs,
                 "Endpoints: N of the approximate KLD over the top-N logprobs (servers cap it; "
                 "brisk and OpenAI at 20)");
  app.add_option("--make", flags->make,
                 "Make candidates from the reference with llama-quantize, e.g. q8_0,q4_k_m,q2_k");
  app.add_flag("--allow-requantize", flags->allow_requantize,
               "Let --make requantize an already-quantized reference");
  app.add_option("--work-dir", flags->work_dir,
                 "Where --make puts (and reuses) its files (default: OUT/models, else "
                 "$BRISK_HOME/quant)");
  app.add_option("--dataset", flags->dataset,
                 "Check set, JSONL: prompt or messages plus expect_* checks (default: built in)");
  app.add_option("--limit", flags->limit, "Use only the dataset's first N items (0: all)");
  app.add_option("--max-tokens", flags->max_tokens, "New tokens per answer, unless an item says");
  app.add_option("--ctx-size", flags->ctx_size,
                 "KV context of every model (memory is measured at it)");
  app.add_option("--concurrency", flags->concurrency, "Streams of the concurrency-N decode figure");
  app.add_option("--concurrent-tokens", flags->concurrent_tokens,
                 "Tokens each stream decodes in the concurrency-N figure");
  app.add_option("--threads", flags->threads, "CPU threads (0: all cores)");
  app.add_option("--gate", flags->gates, "Pass/fail rules, replacing the defaults")
      ->default_str(quant::kDefaultGates);
  app.add_option("--prefer", flags->prefer, "Verdict among passing candidates: speed or memory");
  app.add_option("--text", flags->text,
                 "Measure divergence over this text, chunked as llama-perplexity "
                 "--kl-divergence, instead of over the reference's continuations");
  app.add_option("--text-ctx", flags->text_ctx, "Chunk size for --text (llama-perplexity -c)");
  app.add_option("--text-chunks", flags->text_chunks,
                 "Chunks of --text to score (-1: all; llama-perplexity --chunks)");
  app.add_option("--out", flags->out, "Write report.json, report.md and report.html here");
  app.add_flag("--json", flags->json, "Print report.json instead of the table");
  app.add_option("--progress", flags->progress, "auto, bar, lines or off");
  app.add_option("--log-level", flags->log_level, "trace, debug, info, warn, error");
  return [flags] { return run_quant(*flags); };
}

}  // namespace brisk
