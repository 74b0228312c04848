#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "quant/dataset.h"
#include "quant/quant_result.h"

namespace brisk::quant {

struct EndpointSide {
  std::string url;
  std::string model;  // "": the first of the server's GET /v1/models
};

struct EndpointRunInputs {
  EndpointSide reference;
  std::vector<EndpointSide> candidates;
  std::string api_key;  // sent to every endpoint
  std::vector<DatasetItem> items;
  std::vector<Gate> gates;
  QuantSettings settings;
  int concurrent_tokens = 16;
  int top_logprobs = 20;  // N of the approximate KLD
  bench::ProgressStyle progress = bench::ProgressStyle::off;
};

// brisk quant against OpenAI-compatible servers. Each server gives its greedy answer to every
// item with its top-N logprobs at each position; the candidate's answer is compared with the
// reference's position by position up to the first token where they part (teacher forcing is
// not possible through the API), with the divergence approximated from the two top-N lists
// (top_logprobs.h). Task checks, flips, speed (brisk bench's client), gates and verdict as for
// files; memory, file size, load time and perplexity are not measurable and stay null.
// Nullopt with `error` when an endpoint cannot be reached or answers no item.
std::optional<QuantReport> run_endpoint_quant(const EndpointRunInputs& inputs, std::string* error);

}  // namespace brisk::quant
