#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "bench/openai_client.h"
#include "bench/target_endpoint.h"

namespace brisk::bench {

// How filler words turn into tokens on the target's tokenizer.
struct TokenCalibration {
  double tokens_per_word = 1.3;  // a typical BPE rate for common English words
  int header_tokens = 12;        // tokens of the unique id line that starts every prompt
  bool measured = false;         // false: the defaults above, the server has no /tokenize
};

struct WorkloadOptions {
  ApiKind kind = ApiKind::completions;
  std::string model;
  int input_tokens = 128;
  int output_tokens = 128;
  uint64_t seed = 0;
  bool stream = true;
};

// Synthetic prompts of a fixed length in tokens and a fixed output length. Each prompt starts
// with an id unique to (seed, run, request), so no server can answer from a cached prefix;
// the words after it are random filler drawn from `seed`, so a run is reproducible.
class SyntheticWorkload {
 public:
  SyntheticWorkload(WorkloadOptions options, TargetEndpoint target, TokenCalibration calibration);

  // Tokenizes a few real prompts (with the tokenizer's special tokens, as `usage` counts them)
  // and corrects the number of filler words until their mean length is `input_tokens`: the
  // per-word rate alone misses the BOS token and merges at the header/filler boundary.
  void fit_prompt_length(const std::function<std::optional<int>(const std::string&)>& count_tokens);

  std::string prompt(int run_index, int request_index) const;
  CompletionRequest request(int run_index, int request_index) const;
  const WorkloadOptions& options() const { return options_; }
  int filler_words() const { return filler_words_; }

 private:
  WorkloadOptions options_;
  TargetEndpoint target_;
  double tokens_per_word_ = 1.3;
  int filler_words_ = 0;
};

// Token count of `text` from the server's `POST /tokenize`; nullopt when it has none.
std::optional<int> count_tokens(const TargetEndpoint& target, const std::string& text,
                                bool add_special, std::chrono::milliseconds timeout);

// Counts filler-word tokens with the server's `POST /tokenize` (brisk, llama-server) and returns
// the defaults, unmeasured, when the server lacks it.
TokenCalibration calibrate_tokens(const TargetEndpoint& target, std::chrono::milliseconds timeout);

}  // namespace brisk::bench
