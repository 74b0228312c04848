#include "bench/workload.h"

#include <array>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/http_fetch.h"
#include "bench/length_distribution.h"

namespace brisk::bench {

namespace {

// Common words that most tokenizers keep as one token each (with the leading space).
constexpr std::array<std::string_view, 64> kFillerWords = {
    "time",    "year",     "people", "way",    "day",     "man",    "thing",    "woman",
    "life",    "child",    "world",  "school", "state",   "family", "group",    "country",
    "problem", "hand",     "part",   "place",  "case",    "week",   "company",  "system",
    "program", "question", "work",   "number", "night",   "point",  "home",     "water",
    "room",    "mother",   "area",   "money",  "story",   "fact",   "month",    "lot",
    "right",   "study",    "book",   "eye",    "job",     "word",   "business", "issue",
    "side",    "kind",     "head",   "house",  "service", "friend", "father",   "power",
    "hour",    "game",     "line",   "end",    "member",  "law",    "car",      "city"};

// Fixed-width decimal, not hex: tokenizers split digit runs predictably (one token per digit or
// per group of three), while mixed letters and digits vary from id to id and would make the
// prompt length drift by several tokens.
std::string prompt_header(uint64_t id) {
  return fmt::format("Request {:012d}. Continue:", id % 1'000'000'000'000ULL);
}

}  // namespace

std::string filler_text(uint64_t stream_seed, int words) {
  std::mt19937_64 rng(stream_seed);
  std::string text;
  for (int i = 0; i < words; ++i) {
    text.push_back(' ');
    text.append(kFillerWords[rng() % kFillerWords.size()]);
  }
  return text;
}

std::string all_filler_words() {
  std::string text;
  for (std::string_view word : kFillerWords) {
    text.push_back(' ');
    text.append(word);
  }
  return text;
}

std::string_view tokenizer_api_name(TokenizerApi api) {
  switch (api) {
    case TokenizerApi::llama_cpp:
      return "llama.cpp";
    case TokenizerApi::vllm:
      return "vllm";
    case TokenizerApi::none:
      break;
  }
  return "none";
}

std::optional<int> count_tokens(const TargetEndpoint& target, const TokenCalibration& calibration,
                                const std::string& text, bool add_special,
                                std::chrono::milliseconds timeout) {
  const auto tokens = tokenize(target, calibration, text, add_special, timeout);
  if (!tokens) return std::nullopt;
  return static_cast<int>(tokens->size());
}

std::optional<std::vector<int>> tokenize(const TargetEndpoint& target,
                                         const TokenCalibration& calibration,
                                         const std::string& text, bool add_special,
                                         std::chrono::milliseconds timeout) {
  nlohmann::json body;
  if (calibration.api == TokenizerApi::llama_cpp) {
    body = {{"content", text}, {"add_special", add_special}};
  } else if (calibration.api == TokenizerApi::vllm) {
    body = {{"model", calibration.model}, {"prompt", text}, {"add_special_tokens", add_special}};
  } else {
    return std::nullopt;
  }
  const FetchResult result = fetch(target, "/tokenize", body.dump(), timeout);
  if (!result.ok()) return std::nullopt;
  const auto reply = nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object() || !reply.contains("tokens") || !reply["tokens"].is_array())
    return std::nullopt;
  std::vector<int> ids;
  for (const nlohmann::json& token : reply["tokens"]) {
    // llama.cpp answers {"id", "piece"} objects when asked for pieces; plain ids otherwise.
    const nlohmann::json& id = token.is_object() ? token.value("id", nlohmann::json()) : token;
    if (!id.is_number_integer()) return std::nullopt;
    ids.push_back(id.get<int>());
  }
  return ids;
}

SyntheticWorkload::SyntheticWorkload(WorkloadOptions options, TargetEndpoint target,
                                     TokenCalibration calibration)
    : options_(std::move(options)),
      target_(std::move(target)),
      tokens_per_word_(calibration.tokens_per_word),
      header_tokens_(calibration.header_tokens) {}

int SyntheticWorkload::filler_words(int tokens) const {
  const double filler_tokens = std::max(0, tokens - header_tokens_);
  return std::max(
      0, static_cast<int>(std::lround(filler_tokens / tokens_per_word_)) + correction_words_);
}

void SyntheticWorkload::fit_prompt_length(
    const std::function<std::optional<int>(const std::string&)>& count_tokens) {
  // Sample prompts use ids no measured request gets, at the distribution's mean length.
  constexpr int kSamples = 4;
  const int target_tokens = static_cast<int>(std::lround(options_.input_tokens.mean()));
  for (int round = 0; round < 3; ++round) {
    double total = 0;
    for (int i = 0; i < kSamples; ++i) {
      const auto tokens = count_tokens(prompt_of_length(mix_bits(~uint64_t(i)), target_tokens));
      if (!tokens) return;
      total += *tokens;
    }
    const double error = target_tokens - total / kSamples;
    const int correction = static_cast<int>(std::lround(error / tokens_per_word_));
    if (correction == 0) return;
    correction_words_ += correction;
  }
}

std::string SyntheticWorkload::prompt_of_length(uint64_t id, int tokens) const {
  return prompt_header(id) + filler_text(id, filler_words(tokens));
}

namespace {

// Independent keys for the prompt id, its length and the output length of one request.
uint64_t request_key(uint64_t seed, int run_index, int request_index, uint64_t salt) {
  return mix_bits(mix_bits(mix_bits(seed) ^ static_cast<uint64_t>(run_index)) ^
                  static_cast<uint64_t>(request_index)) ^
         salt;
}

constexpr uint64_t kIdSalt = 0;
constexpr uint64_t kInputSalt = 0x1f83d9abfb41bd6bULL;
constexpr uint64_t kOutputSalt = 0x5be0cd19137e2179ULL;
constexpr uint64_t kQuerySalt = 0x1f83d9abfb41bd6bULL;

}  // namespace

std::string SyntheticWorkload::prompt(int run_index, int request_index) const {
  const uint64_t id = request_key(options_.seed, run_index, request_index, kIdSalt);
  const int tokens = options_.input_tokens.sample(
      request_key(options_.seed, run_index, request_index, kInputSalt));
  return prompt_of_length(id, tokens);
}

int SyntheticWorkload::output_tokens(int run_index, int request_index) const {
  return options_.output_tokens.sample(
      request_key(options_.seed, run_index, request_index, kOutputSalt));
}

CompletionRequest SyntheticWorkload::request(int run_index, int request_index) const {
  if (pooling_route(options_.kind)) {
    // Each input its own prompt, numbered on from the request's, so none repeats another.
    std::vector<std::string> inputs;
    const int count = options_.inputs_per_request;
    for (int i = 0; i < count; ++i) inputs.push_back(prompt(run_index, request_index * count + i));
    const std::string route = target_.route(completion_route(options_.kind));
    if (options_.kind == ApiKind::embeddings) {
      return CompletionRequest{route, build_embeddings_body(options_.model, inputs), false, count};
    }
    const std::string query = prompt_of_length(
        request_key(options_.seed, run_index, request_index, kQuerySalt), kRerankQueryTokens);
    return CompletionRequest{route, build_rerank_body(options_.model, query, inputs), false,
                             count};
  }
  return CompletionRequest{
      target_.route(completion_route(options_.kind)),
      build_completion_body(options_.kind, options_.model, prompt(run_index, request_index),
                            output_tokens(run_index, request_index), options_.stream,
                            options_.sampling),
      options_.stream};
}

TokenCalibration calibrate_tokens(const TargetEndpoint& target, const std::string& model,
                                  std::chrono::milliseconds timeout) {
  constexpr int kSampleWords = 512;
  const std::string header = prompt_header(mix_bits(1));
  const std::string whole = header + filler_text(1, kSampleWords);
  // llama.cpp's fields first: llama-server answers a body without "content" with no tokens
  // (200), while vLLM and SGLang refuse one without "prompt".
  for (const TokenizerApi api : {TokenizerApi::llama_cpp, TokenizerApi::vllm}) {
    TokenCalibration calibration;
    calibration.api = api;
    calibration.model = model;
    const auto header_tokens = count_tokens(target, calibration, header, false, timeout);
    if (!header_tokens || *header_tokens <= 0) continue;
    const auto whole_tokens = count_tokens(target, calibration, whole, false, timeout);
    if (!whole_tokens || *whole_tokens <= *header_tokens) continue;
    calibration.header_tokens = *header_tokens;
    calibration.tokens_per_word =
        static_cast<double>(*whole_tokens - *header_tokens) / kSampleWords;
    return calibration;
  }
  return TokenCalibration{};
}

}  // namespace brisk::bench
