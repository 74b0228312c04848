#include "quant/endpoint_run.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "quant/endpoint_speed.h"
#include "quant/quant_endpoint.h"
#include "quant/verdict.h"

namespace brisk::quant {
namespace {

constexpr std::chrono::milliseconds kRequestTimeout = std::chrono::minutes(5);

// "127.0.0.1:8080", plus the path prefix when there is one.
std::string endpoint_name(const QuantEndpoint& endpoint) {
  return endpoint.target.host_header() + endpoint.target.base_path;
}

std::string unique_name(std::string name, const std::vector<std::string>& taken) {
  const std::string base = name;
  for (int suffix = 2; std::find(taken.begin(), taken.end(), name) != taken.end(); ++suffix) {
    name = base + "-" + std::to_string(suffix);
  }
  return name;
}

struct EndpointAnswers {
  ModelRun run;
  // Parallel to the items; nullopt where the request failed (counted as an error).
  std::vector<std::optional<LogprobsAnswer>> answers;
};

// Every item's greedy answer with logprobs; fails only when no item could be answered, since
// then nothing can be compared (the first error says why, e.g. no logprobs support).
std::optional<EndpointAnswers> answer_items(const QuantEndpoint& endpoint,
                                            const EndpointRunInputs& inputs,
                                            const std::function<void()>& after_item,
                                            std::string* error) {
  EndpointAnswers result;
  result.run.url = endpoint.url;
  result.run.file = endpoint.url;
  result.run.model = endpoint.model;
  result.run.description = "model '" + endpoint.model + "' at " + endpoint.url;
  std::string first_error;
  int answered = 0;
  for (const DatasetItem& item : inputs.items) {
    const int max_tokens = item.max_tokens > 0 ? item.max_tokens : inputs.settings.max_tokens;
    std::string item_error;
    auto answer = generate_with_logprobs(endpoint, item, max_tokens, inputs.top_logprobs,
                                         kRequestTimeout, &item_error);
    // A position without alternatives would compare as identical: refuse the answer instead.
    const auto unlisted = [](const TokenWithLogprobs& token) { return token.top.empty(); };
    if (answer && std::any_of(answer->tokens.begin(), answer->tokens.end(), unlisted)) {
      answer.reset();
      item_error = endpoint.flag + " " + endpoint.url + ", item '" + item.id +
                   "': the response lists no top_logprobs alternatives for a token";
    }
    if (!answer && first_error.empty()) first_error = item_error;
    answered += answer ? 1 : 0;
    result.run.answers.push_back(evaluate_answer(item, answer ? answer->text : ""));
    result.answers.push_back(std::move(answer));
    after_item();
  }
  if (answered == 0 && !inputs.items.empty()) {
    *error = "no item was answered with logprobs: " + first_error;
    return std::nullopt;
  }
  return result;
}

// Quality requests that failed count among the endpoint's errors, like failed generations of a
// file.
void add_answer_errors(const EndpointAnswers& answers, SpeedFigures* speed) {
  for (const auto& answer : answers.answers) {
    ++speed->requests;
    speed->errors += answer ? 0 : 1;
  }
  speed->error_rate =
      speed->requests > 0 ? static_cast<double>(speed->errors) / speed->requests : 0;
}

void compare_continuations(const EndpointRunInputs& inputs, const EndpointAnswers& reference,
                           const EndpointAnswers& candidate, CandidateResult* result) {
  DivergenceAccumulator accumulator;
  for (size_t i = 0; i < inputs.items.size(); ++i) {
    const auto& ours = reference.answers[i];
    const auto& theirs = candidate.answers[i];
    if (!ours || !theirs) continue;
    const ContinuationAlignment alignment = align_continuations(ours->tokens, theirs->tokens);
    for (size_t position = 0; position < alignment.compared_positions; ++position) {
      accumulator.add(
          approximate_next_token_divergence(ours->tokens[position], theirs->tokens[position]));
    }
    result->alignments.push_back({inputs.items[i].id, alignment});
  }
  result->divergence = accumulator.summary();
}

}  // namespace

std::optional<QuantReport> run_endpoint_quant(const EndpointRunInputs& inputs, std::string* error) {
  auto reference_endpoint =
      connect_endpoint("--reference-url", inputs.reference.url, inputs.api_key,
                       inputs.reference.model, std::chrono::seconds(10), error);
  if (!reference_endpoint) return std::nullopt;
  std::vector<QuantEndpoint> candidate_endpoints;
  for (const EndpointSide& side : inputs.candidates) {
    auto endpoint = connect_endpoint("--candidate-url", side.url, inputs.api_key, side.model,
                                     std::chrono::seconds(10), error);
    if (!endpoint) return std::nullopt;
    candidate_endpoints.push_back(std::move(*endpoint));
  }

  QuantReport report;
  report.mode = "endpoints";
  report.top_n = inputs.top_logprobs;
  report.settings = inputs.settings;
  report.gates = inputs.gates;
  const size_t items = inputs.items.size();
  const size_t candidates = candidate_endpoints.size();
  const int steps = static_cast<int>((items + 1) * (1 + candidates));
  bench::ProgressDisplay progress(inputs.progress, "quant", steps, 0);
  bench::ProgressDisplay::mark_measured_start(progress.counters(), Clock::now());
  auto step_done = [&progress] { ++progress.counters().finished; };

  auto reference = answer_items(*reference_endpoint, inputs, step_done, error);
  if (!reference) {
    *error = "--reference-url " + inputs.reference.url + ": " + *error;
    return std::nullopt;
  }
  reference->run.name = endpoint_name(*reference_endpoint);
  reference->run.speed = measure_endpoint_speed(
      *reference_endpoint, inputs.items, inputs.settings.max_tokens, inputs.settings.concurrency,
      inputs.concurrent_tokens, kRequestTimeout);
  add_answer_errors(*reference, &reference->run.speed);
  step_done();
  report.reference = reference->run;

  std::vector<std::string> names = {report.reference.name};
  for (const QuantEndpoint& endpoint : candidate_endpoints) {
    auto candidate = answer_items(endpoint, inputs, step_done, error);
    if (!candidate) {
      *error = "--candidate-url " + endpoint.url + ": " + *error;
      return std::nullopt;
    }
    CandidateResult result;
    result.run = std::move(candidate->run);
    result.run.name = unique_name(endpoint_name(endpoint), names);
    names.push_back(result.run.name);
    result.run.speed = measure_endpoint_speed(endpoint, inputs.items, inputs.settings.max_tokens,
                                              inputs.settings.concurrency, inputs.concurrent_tokens,
                                              kRequestTimeout);
    add_answer_errors(*candidate, &result.run.speed);
    step_done();
    compare_continuations(inputs, *reference, *candidate, &result);
    result.tasks = compare_tasks(inputs.items, report.reference.answers, result.run.answers);
    judge_candidate(inputs.gates, /*perplexity_measured=*/false, &result);
    report.candidates.push_back(std::move(result));
  }
  progress.stop();
  report.verdict = choose_candidate(report.reference, report.candidates, inputs.settings.prefer);
  report.notes.push_back(
      "divergence: APPROXIMATE, from each server's top " + std::to_string(inputs.top_logprobs) +
      " logprobs of its own greedy answer, compared position by position up to the first token "
      "where the two answers part (no teacher forcing over an API); see docs/quant.md");
  report.notes.push_back(
      "memory, file size, load time and perplexity are not measurable over HTTP (null)");
  return report;
}

}  // namespace brisk::quant
