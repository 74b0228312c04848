#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/length_distribution.h"
#include "bench/openai_client.h"
#include "bench/target_endpoint.h"

namespace brisk::bench {

// What a load generator sends: request `request_index` of load point `run_index`, counting
// warmup requests first. The same indices always give the same request.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual CompletionRequest request(int run_index, int request_index) const = 0;
  virtual ApiKind kind() const = 0;
};

// The fields a server's `POST /tokenize` speaks: llama.cpp's (brisk, llama-server:
// {"content", "add_special"}) or vLLM's, which SGLang shares ({"model", "prompt",
// "add_special_tokens"}); none when it has neither.
enum class TokenizerApi { none, llama_cpp, vllm };
// "llama.cpp", "vllm" (vLLM or SGLang) or "none": result.json's workload.tokenizer.
std::string_view tokenizer_api_name(TokenizerApi api);

// How filler words turn into tokens on the target's tokenizer.
struct TokenCalibration {
  double tokens_per_word = 1.3;           // a typical BPE rate for common English words
  int header_tokens = 12;                 // tokens of the unique id line that starts every prompt
  TokenizerApi api = TokenizerApi::none;  // none: the defaults above, nothing was measured
  std::string model;                      // sent with vLLM's fields
  bool measured() const { return api != TokenizerApi::none; }
};

// A synthetic rerank request's query: a search box's length, whatever the documents'.
constexpr int kRerankQueryTokens = 16;

struct WorkloadOptions {
  ApiKind kind = ApiKind::completions;
  std::string model;
  LengthDistribution input_tokens = LengthDistribution::fixed_at(128);
  LengthDistribution output_tokens = LengthDistribution::fixed_at(128);
  uint64_t seed = 0;
  bool stream = true;
  SamplingOptions sampling;
  int inputs_per_request = 1;  // embeddings: inputs in each request
};

// Synthetic prompts whose lengths in tokens follow `input_tokens`, each asking for a length drawn
// from `output_tokens`. Each prompt starts with an id unique to (seed, run, request), so no
// server can answer from a cached prefix; the words after it are random filler drawn from the
// same id, so a run is reproducible.
class SyntheticWorkload : public Workload {
 public:
  SyntheticWorkload(WorkloadOptions options, TargetEndpoint target, TokenCalibration calibration);

  // Tokenizes a few real prompts of the mean length (with the tokenizer's special tokens, as
  // `usage` counts them) and corrects the number of filler words until their mean length is
  // right: the per-word rate alone misses the BOS token and merges at the header/filler boundary.
  void fit_prompt_length(const std::function<std::optional<int>(const std::string&)>& count_tokens);

  std::string prompt(int run_index, int request_index) const;
  int output_tokens(int run_index, int request_index) const;
  CompletionRequest request(int run_index, int request_index) const override;
  ApiKind kind() const override { return options_.kind; }
  const WorkloadOptions& options() const { return options_; }
  // Filler words of a prompt of `tokens` tokens.
  int filler_words(int tokens) const;

 private:
  std::string prompt_of_length(uint64_t id, int tokens) const;

  WorkloadOptions options_;
  TargetEndpoint target_;
  double tokens_per_word_ = 1.3;
  int header_tokens_ = 12;
  int correction_words_ = 0;  // learned by fit_prompt_length
};

// ` word word ...`: `words` filler words drawn from `stream_seed` (common English words that
// most tokenizers keep as one token each, with the leading space).
std::string filler_text(uint64_t stream_seed, int words);
// Every filler word once, in order.
std::string all_filler_words();

// The token ids of `text` from the server's `POST /tokenize` in the calibration's fields;
// nullopt when it has none or the call fails.
std::optional<std::vector<int>> tokenize(const TargetEndpoint& target,
                                         const TokenCalibration& calibration,
                                         const std::string& text, bool add_special,
                                         std::chrono::milliseconds timeout);

// Token count of `text` from the server's `POST /tokenize` in the calibration's fields; nullopt
// when it has none or the call fails.
std::optional<int> count_tokens(const TargetEndpoint& target, const TokenCalibration& calibration,
                                const std::string& text, bool add_special,
                                std::chrono::milliseconds timeout);

// Finds which `POST /tokenize` the server speaks (llama.cpp's fields, then vLLM's and SGLang's)
// and counts filler-word tokens with it; returns the defaults, unmeasured, when it has neither.
TokenCalibration calibrate_tokens(const TargetEndpoint& target, const std::string& model,
                                  std::chrono::milliseconds timeout);

}  // namespace brisk::bench
