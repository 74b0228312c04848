#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "bench/target_endpoint.h"
#include "quant/dataset.h"
#include "quant/top_logprobs.h"

namespace brisk::quant {

// An OpenAI-compatible server under comparison, reached through brisk bench's HTTP client.
struct QuantEndpoint {
  std::string flag;  // the flag that named it, e.g. "--candidate-url", for messages
  std::string url;
  bench::TargetEndpoint target;
  std::string model;  // sent with every request
};

// Parses `url`, checks the server answers, and takes the first model of GET /v1/models unless
// `model` names one. Nullopt with `error` naming the flag and what to change.
std::optional<QuantEndpoint> connect_endpoint(const std::string& flag, const std::string& url,
                                              const std::string& api_key, const std::string& model,
                                              std::chrono::milliseconds timeout,
                                              std::string* error);

// The endpoint's greedy answer to `item` (temperature 0; a plain prompt on /v1/completions,
// messages on /v1/chat/completions, rendered by the server's own chat template) with the
// `top_logprobs` most likely tokens at every position. Nullopt with `error` on a failed request
// or a response without logprobs.
std::optional<LogprobsAnswer> generate_with_logprobs(const QuantEndpoint& endpoint,
                                                     const DatasetItem& item, int max_tokens,
                                                     int top_logprobs,
                                                     std::chrono::milliseconds timeout,
                                                     std::string* error);

}  // namespace brisk::quant
