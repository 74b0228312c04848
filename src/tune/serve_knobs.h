#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tune/knob.h"

namespace brisk::tune {

// brisk serve's flags that decide its latency and throughput under load, each with the values
// worth measuring on this machine, starting from `base_flags` (the user's --base-flags; its
// values become the baselines, brisk serve's defaults where it sets none).
struct ServeKnobs {
  std::vector<std::string> fixed_args;  // base_flags without the flags the knobs set
  std::vector<Knob> knobs;
  // The workload's longest request, prompt + answer, in tokens; 0: unknown (a dataset).
  int longest_request_tokens = 0;
};

ServeKnobs brisk_serve_knobs(std::vector<std::string> base_flags, int cores);

// The same for an embedding model, whose flags set the dynamic batcher instead: the window,
// the inputs and tokens of one batch, and the threads. longest_request_tokens is then the
// workload's longest input.
ServeKnobs embedding_serve_knobs(std::vector<std::string> base_flags, int cores);

// Why an embedding setting cannot serve the workload: a --max-batch-tokens below its longest
// input, which brisk serve refuses (400); nullopt when it can.
std::optional<std::string> batch_tokens_refusal(const ServeKnobs& serve, const Setting& setting);

// The --ctx-size a per-sequence KV layout needs so that no request of the workload is refused:
// with a buffer per sequence each holds --ctx-size / --max-seqs cells, and brisk serve refuses a
// longer request (400). So a per-sequence candidate gets --max-seqs × the longest request
// (rounded up to 256) where the configured context would leave a smaller share; nullopt where
// it needs none (a unified layout, a share that holds it, an unknown longest request).
std::optional<int> per_sequence_context(const ServeKnobs& serve, const Setting& setting);

}  // namespace brisk::tune
