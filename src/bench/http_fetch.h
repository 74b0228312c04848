#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "bench/target_endpoint.h"

namespace brisk::bench {

struct FetchResult {
  int status = 0;  // 0 when no HTTP response arrived
  std::string body;
  std::string error;  // network failure, empty when a response arrived (whatever its status)
  bool ok() const { return status == 200; }
};

// One blocking request for setup steps (model discovery, tokenizer calibration), outside the
// measured load; `body` empty means GET, otherwise POST with a JSON body.
FetchResult fetch(const TargetEndpoint& target, const std::string& route, const std::string& body,
                  std::chrono::milliseconds timeout);

// The first model id of GET /v1/models: what a server serves when the user named none. nullopt
// with `error` when it cannot be read (every JSON type is checked: an odd answer is an error).
std::optional<std::string> first_served_model(const TargetEndpoint& target,
                                              std::chrono::milliseconds timeout,
                                              std::string& error);

// The "kind" GET /v1/models gives `model` (brisk serve: "embedding" or "generation"); empty when
// the server says none (most do not) or cannot be read.
std::string served_model_kind(const TargetEndpoint& target, const std::string& model,
                              std::chrono::milliseconds timeout);

}  // namespace brisk::bench
