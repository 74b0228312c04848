#include "bench/sampling_options.h"

#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "common/json_nesting.h"

namespace brisk::bench {

using json = nlohmann::json;

json SamplingOptions::sent_sampling() const {
  json sent = json::object();
  if (temperature) sent["temperature"] = *temperature;
  if (top_p) sent["top_p"] = *top_p;
  if (top_k) sent["top_k"] = *top_k;
  if (min_p) sent["min_p"] = *min_p;
  return sent;
}

void SamplingOptions::add_to(json& body) const {
  body.update(sent_sampling());
  body.update(extra_body);
}

const char* reserved_body_key_hint(const std::string& key) {
  static const std::map<std::string, const char*> kHints = {
      {"prompt", "the workload writes the prompts; pass your own with --dataset"},
      {"messages", "the workload writes the prompts; pass your own with --dataset"},
      {"model", "use --model"},
      {"max_tokens", "use --output-tokens"},
      {"max_completion_tokens", "use --output-tokens"},
      {"stream", "use --no-stream"},
      {"stream_options",
       "brisk bench asks for the usage event itself, since token counts come from it"},
      {"temperature", "use --temperature"},
      {"top_p", "use --top-p"},
      {"top_k", "use --top-k"},
      {"min_p", "use --min-p"},
  };
  const auto it = kHints.find(key);
  return it == kHints.end() ? nullptr : it->second;
}

namespace {

std::string range_error(const SamplingOptions& sampling) {
  auto outside = [](const std::optional<double>& value, double low, double high, bool low_open) {
    return value &&
           !(std::isfinite(*value) && (low_open ? *value > low : *value >= low) && *value <= high);
  };
  if (outside(sampling.temperature, 0, std::numeric_limits<double>::max(), false)) {
    return fmt::format("--temperature {} is not a temperature: give 0 (greedy) or more",
                       *sampling.temperature);
  }
  if (outside(sampling.top_p, 0, 1, true)) {
    return fmt::format("--top-p {} is outside (0, 1]: give a probability mass such as 0.95",
                       *sampling.top_p);
  }
  if (sampling.top_k && *sampling.top_k < -1) {
    return fmt::format("--top-k {} is negative: give a token count, or -1 or 0 for no limit",
                       *sampling.top_k);
  }
  if (outside(sampling.min_p, 0, 1, false)) {
    return fmt::format("--min-p {} is outside [0, 1]: give a probability such as 0.05",
                       *sampling.min_p);
  }
  return {};
}

}  // namespace

std::optional<SamplingOptions> complete_sampling_options(SamplingOptions sampling,
                                                         const std::string& extra_body_json,
                                                         std::string& error) {
  error = range_error(sampling);
  if (!error.empty()) return std::nullopt;
  if (extra_body_json.empty()) return sampling;
  const json extra = json::parse(extra_body_json, nullptr, /*allow_exceptions=*/false);
  if (extra.is_discarded()) {
    error = fmt::format(
        "--extra-body is not valid JSON: give one JSON object in single quotes, e.g. "
        "--extra-body '{{\"seed\": 1}}' (got {})",
        extra_body_json.substr(0, 200));
    return std::nullopt;
  }
  if (!extra.is_object()) {
    error = fmt::format(
        "--extra-body must be a JSON object whose keys are added to every request body, e.g. "
        "'{{\"seed\": 1}}' (got a {})",
        extra.type_name());
    return std::nullopt;
  }
  // It is copied into and dumped with every request body, which recurses once per level.
  if (json_nesting_exceeds(extra)) {
    error = fmt::format("--extra-body nests more than {} levels deep", kMaxJsonNesting);
    return std::nullopt;
  }
  for (const auto& [key, value] : extra.items()) {
    if (const char* hint = reserved_body_key_hint(key)) {
      error = fmt::format("--extra-body may not set \"{}\": {}", key, hint);
      return std::nullopt;
    }
  }
  sampling.extra_body = extra;
  return sampling;
}

}  // namespace brisk::bench
