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
};

ServeKnobs brisk_serve_knobs(std::vector<std::string> base_flags, int cores);

// Why `setting` cannot serve requests of `longest_request_tokens` (prompt + answer) at all: with
// a KV buffer per sequence each holds --ctx-size / --max-seqs cells, and brisk serve refuses a
// longer request (400). nullopt when it can.
std::optional<std::string> share_refusal(const ServeKnobs& serve, const Setting& setting,
                                         int longest_request_tokens);

}  // namespace brisk::tune
