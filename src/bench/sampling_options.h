#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace brisk::bench {

// What every request body carries beyond the workload: sampling parameters and any other fields
// the user merges in with --extra-body. Unset parameters are not sent at all, so the server's own
// defaults apply, as for a plain OpenAI SDK client; a comparison that wants the same sampling on
// every server has to say so.
struct SamplingOptions {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> min_p;
  nlohmann::json extra_body = nlohmann::json::object();

  // The sampling keys sent, e.g. {"temperature": 0.8, "top_k": 40}; {} when none is.
  nlohmann::json sent_sampling() const;
  // Adds the sampling keys, then every key of `extra_body`, to a generated request body.
  void add_to(nlohmann::json& body) const;
};

// Keys of a request body that --extra-body may not set, each with what to use instead: the
// workload's prompt and length, the model, streaming (the measurement reads the stream and its
// usage event) and the parameters that have a flag of their own. Null when `key` may be set.
const char* reserved_body_key_hint(const std::string& key);

// `sampling` with the text of --extra-body (empty: nothing merged) parsed into it, every value
// checked. nullopt with `error` saying what to change.
std::optional<SamplingOptions> complete_sampling_options(SamplingOptions sampling,
                                                         const std::string& extra_body_json,
                                                         std::string& error);

}  // namespace brisk::bench
