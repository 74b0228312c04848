#pragma once

#include <optional>
#include <string>
#include <vector>

namespace brisk::bench {

// One load point of a preset: a closed loop of `concurrency` users sending prompts of
// `input_tokens` and asking for `output_tokens`.
struct PresetCase {
  std::string name;  // e.g. "short_input_low_concurrency"
  int input_tokens = 0;
  int output_tokens = 0;
  int concurrency = 1;
};

// "standard" runs the four cases every comparison needs: short and long input, each at low and
// at peak concurrency. Its sizes can be changed after a colon:
// "standard:short=128,long=2048,output=128,low=1,peak=16" (these are the defaults).
// Returns nullopt with `error` listing what is accepted.
std::optional<std::vector<PresetCase>> parse_workload_preset(const std::string& spec,
                                                             std::string& error);

}  // namespace brisk::bench
