#include "bench/workload_builder.h"

#include <cmath>

#include <fmt/format.h>

#include "bench/dataset_workload.h"

namespace brisk::bench {

namespace {

using json = nlohmann::json;

json length_fields(const std::string& name, const LengthDistribution& lengths) {
  return {{name, lengths.mean()}, {name + "_dist", lengths.spec()}};
}

BuiltWorkload synthetic(const WorkloadSpec& spec, const TargetEndpoint& target,
                        const TokenCalibration& calibration, std::chrono::milliseconds timeout) {
  auto workload = std::make_unique<SyntheticWorkload>(
      WorkloadOptions{spec.kind, spec.model, spec.input_tokens, spec.output_tokens, spec.seed,
                      spec.stream, spec.sampling, spec.inputs_per_request},
      target, calibration);
  if (calibration.measured() && spec.kind != ApiKind::chat) {
    // (Chat prompts are wrapped in the server's template, which /tokenize does not apply.)
    workload->fit_prompt_length([&](const std::string& text) {
      return count_tokens(target, calibration, text, /*add_special=*/true, timeout);
    });
  }
  json description = {{"source", "synthetic"},
                      {"seed", spec.seed},
                      {"tokenizer", tokenizer_api_name(calibration.api)}};
  description.update(length_fields("input_tokens", spec.input_tokens));
  const bool pooling = pooling_route(spec.kind);
  if (pooling) {
    description["endpoint"] = pooling_route_name(spec.kind);
    description["inputs_per_request"] = spec.inputs_per_request;
  } else {
    description.update(length_fields("output_tokens", spec.output_tokens));
  }
  const int mean_tokens = static_cast<int>(std::lround(spec.input_tokens.mean()));
  std::string summary = fmt::format(
      "input={} tokens ({} filler words at the mean, {:.2f} tokens/word {}) output={} tokens",
      spec.input_tokens.spec(), workload->filler_words(mean_tokens), calibration.tokens_per_word,
      calibration.measured()
          ? fmt::format("measured via /tokenize, {} fields", tokenizer_api_name(calibration.api))
          : std::string("assumed: the server has no /tokenize brisk speaks"),
      spec.output_tokens.spec());
  if (pooling) {
    summary = fmt::format("{} {} per request, {}", spec.inputs_per_request,
                          spec.kind == ApiKind::rerank
                              ? fmt::format("documents (and a {}-token query)", kRerankQueryTokens)
                              : std::string("inputs"),
                          summary.substr(0, summary.find(" output=")));
  }
  // Every prompt starts with its unique id line (so no prefix cache can answer it), plus BOS.
  const int shortest_tokens = calibration.header_tokens + 1;
  if (calibration.measured() && spec.input_tokens.mean() < shortest_tokens) {
    summary += fmt::format(
        "\nwarning: prompts cannot be shorter than {} tokens here (the unique id line and BOS); "
        "ask --input-tokens {} or more for exact lengths",
        shortest_tokens, shortest_tokens);
  }
  return {std::move(workload), std::move(description), std::move(summary)};
}

}  // namespace

std::optional<BuiltWorkload> build_workload(const WorkloadSpec& spec, const TargetEndpoint& target,
                                            const TokenCalibration& calibration,
                                            std::chrono::milliseconds timeout, std::string& error) {
  if (spec.jsonl_path.empty() && spec.sharegpt_path.empty()) {
    return synthetic(spec, target, calibration, timeout);
  }
  const bool jsonl = !spec.jsonl_path.empty();
  const std::string& path = jsonl ? spec.jsonl_path : spec.sharegpt_path;
  auto entries = jsonl ? load_jsonl_dataset(path, error)
                       : load_sharegpt_dataset(
                             path, spec.sharegpt_wanted, spec.seed, ShareGptLimits{},
                             [&](const std::string& text) {
                               return count_tokens(target, calibration, text,
                                                   /*add_special=*/false, timeout);
                             },
                             error);
  if (!entries) return std::nullopt;
  if (spec.kind == ApiKind::completions) {
    for (size_t i = 0; i < entries->size(); ++i) {
      if ((*entries)[i].has_messages()) {
        error = fmt::format(
            "{}: prompt {} has \"messages\", which only /v1/chat/completions takes: add "
            "--endpoint chat",
            path, i + 1);
        return std::nullopt;
      }
    }
  }
  const size_t size = entries->size();
  json description = {{"source", jsonl ? "jsonl" : "sharegpt"},
                      {"tokenizer", tokenizer_api_name(calibration.api)},
                      {"dataset", path},
                      {"dataset_entries", size},
                      {"seed", spec.seed}};
  if (spec.output_tokens_given) {
    description.update(length_fields("output_tokens", spec.output_tokens));
  }
  std::string summary = fmt::format(
      "{} prompts from {}{}", size, path,
      spec.output_tokens_given
          ? fmt::format(", output={} tokens", spec.output_tokens.spec())
          : fmt::format(", output=each prompt's own length (else {})", spec.output_tokens.spec()));
  auto workload = std::make_unique<DatasetWorkload>(
      std::move(*entries), spec.kind, spec.model, target, spec.output_tokens,
      spec.output_tokens_given ? std::optional(spec.output_tokens) : std::nullopt, spec.seed,
      spec.stream, spec.sampling);
  return BuiltWorkload{std::move(workload), std::move(description), std::move(summary)};
}

std::vector<BuiltWorkload> build_preset_workloads(WorkloadSpec spec,
                                                  const std::vector<PresetCase>& cases,
                                                  const TargetEndpoint& target,
                                                  const TokenCalibration& calibration,
                                                  std::chrono::milliseconds timeout) {
  std::vector<BuiltWorkload> built;
  spec.jsonl_path.clear();
  spec.sharegpt_path.clear();
  for (const PresetCase& preset_case : cases) {
    spec.input_tokens = LengthDistribution::fixed_at(preset_case.input_tokens);
    spec.output_tokens = LengthDistribution::fixed_at(preset_case.output_tokens);
    BuiltWorkload one = synthetic(spec, target, calibration, timeout);
    one.description["case"] = preset_case.name;
    one.summary = fmt::format("preset case {}: concurrency {}, {}", preset_case.name,
                              preset_case.concurrency, one.summary);
    built.push_back(std::move(one));
  }
  return built;
}

std::optional<TraceReplay> build_trace_replay(
    const std::string& path, TraceFormat format, const TraceReplayOptions& options,
    const WorkloadSpec& spec, int warmup, const TargetEndpoint& target,
    const TokenCalibration& calibration, std::chrono::milliseconds timeout, std::string& error) {
  const auto trace = read_trace_file(path, format, error);
  auto schedule = trace ? schedule_trace(*trace, options, error) : std::nullopt;
  if (!schedule) return std::nullopt;
  auto workload = std::make_unique<TraceWorkload>(
      schedule->records, spec.model, replay_token_pool(target, calibration, timeout), calibration,
      warmup, spec.seed, spec.stream, spec.sampling);
  json description =
      describe_trace_workload(path, *trace, *schedule, options, workload->exact_lengths());
  description["seed"] = spec.seed;
  const std::string summary =
      fmt::format("trace {} ({}): {} of its {} requests over {:.1f} s, prompts as {}", path,
                  trace_format_name(trace->format), schedule->records.size(), trace->records.size(),
                  schedule->offsets_s.back(), description["prompt"].get<std::string>());
  const TraceWorkload* prompts = workload.get();
  return TraceReplay{
      {std::move(workload), std::move(description), summary}, prompts, std::move(*schedule)};
}

}  // namespace brisk::bench
