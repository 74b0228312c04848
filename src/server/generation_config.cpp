#include "server/generation_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace brisk {

std::variant<GenerationDefaults, std::string> make_generation_defaults(
    std::string_view preset, std::string_view override_json) {
  GenerationDefaults defaults;
  if (preset == "llama-server") {
    defaults.sampling.temperature = 0.8f;
    defaults.sampling.top_k = 40;
    defaults.sampling.top_p = 0.95f;
    defaults.sampling.min_p = 0.05f;
  } else if (preset != "openai") {
    return fmt::format("--generation-config '{}' is not a preset; use openai or llama-server",
                       preset);
  }
  if (override_json.empty()) return defaults;

  const nlohmann::json fields = nlohmann::json::parse(override_json, nullptr, false);
  if (fields.is_discarded() || !fields.is_object()) {
    return std::string(
        "--override-generation-config must be a JSON object, e.g. "
        "'{\"temperature\": 0.7, \"top_k\": 40}'");
  }
  for (const auto& [key, value] : fields.items()) {
    if (key != "temperature" && key != "top_p" && key != "top_k" && key != "min_p" &&
        key != "max_tokens") {
      return fmt::format(
          "--override-generation-config: unknown field '{}'; allowed: temperature, top_p, "
          "top_k, min_p, max_tokens",
          key);
    }
  }
  if (auto error = read_sampling_params(fields, defaults.sampling)) {
    return "--override-generation-config: " + error->message;
  }
  if (auto it = fields.find("max_tokens"); it != fields.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 24)) {
      return std::string("--override-generation-config: 'max_tokens' must be a positive integer");
    }
    defaults.max_tokens = static_cast<int>(it->get<int64_t>());
  }
  return defaults;
}

std::string describe_generation_defaults(const GenerationDefaults& defaults) {
  const SamplingParams& s = defaults.sampling;
  return fmt::format(
      "temperature {}, top_p {}, top_k {}, min_p {}, max_tokens {}", s.temperature, s.top_p,
      s.top_k > 0 ? std::to_string(s.top_k) : "off", s.min_p,
      defaults.max_tokens ? std::to_string(*defaults.max_tokens) : "what the context leaves");
}

}  // namespace brisk
