#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/workload.h"

namespace brisk::bench {

// One prompt of a fixed test set: a plain prompt, or chat messages.
struct DatasetEntry {
  std::string prompt;                // used when `messages` is null
  nlohmann::json messages;           // an OpenAI `messages` array, or null
  std::optional<int> output_tokens;  // the entry's own length, when it has one
  bool has_messages() const { return messages.is_array(); }
};

// A JSONL file: one JSON object per line with "prompt" (a string) or "messages" (an OpenAI
// messages array), and optionally "max_tokens" (or "output_tokens"). Blank lines are skipped.
// Returns nullopt with `error` naming the line and what to change.
std::optional<std::vector<DatasetEntry>> load_jsonl_dataset(const std::string& path,
                                                            std::string& error);

// Limits of the ShareGPT sample, as vLLM's `bench serve` applies them, so that results compare.
struct ShareGptLimits {
  int min_tokens = 4;  // prompt and reply each at least this long
  int max_prompt_tokens = 1024;
  int max_total_tokens = 2048;  // prompt + reply
};

// A ShareGPT-format JSON file (an array of {"conversations": [{"from": "human"|"gpt", "value"}]}):
// the first human turn of each conversation is the prompt and the reply after it sets the
// output length, in the target's tokens via `count_tokens` (which returns nullopt when the
// server cannot tokenize: then 4 characters count as a token). Conversations are shuffled with
// `seed` and taken until `wanted` pass `limits`.
std::optional<std::vector<DatasetEntry>> load_sharegpt_dataset(
    const std::string& path, int wanted, uint64_t seed, const ShareGptLimits& limits,
    const std::function<std::optional<int>(const std::string&)>& count_tokens, std::string& error);

// Replays a fixed test set: request i (warmup requests first) of every load point sends entry
// i mod size, so each load point sends the same prompts in the same order. Output length: the
// entry's own, unless `output_override` is set, else `default_output`.
class DatasetWorkload : public Workload {
 public:
  DatasetWorkload(std::vector<DatasetEntry> entries, ApiKind kind, std::string model,
                  TargetEndpoint target, LengthDistribution default_output,
                  std::optional<LengthDistribution> output_override, uint64_t seed, bool stream,
                  SamplingOptions sampling);

  CompletionRequest request(int run_index, int request_index) const override;
  ApiKind kind() const override { return kind_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<DatasetEntry> entries_;
  ApiKind kind_;
  std::string model_;
  TargetEndpoint target_;
  LengthDistribution default_output_;
  std::optional<LengthDistribution> output_override_;
  uint64_t seed_;
  bool stream_;
  SamplingOptions sampling_;
};

}  // namespace brisk::bench
