#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "server/completion_params.h"

namespace brisk {

// Names of the --generation-config presets, default first.
inline constexpr const char* kGenerationConfigPresets[] = {"openai", "llama-server"};

// The server-wide defaults for what a request leaves out: a preset ("openai": temperature 1 over
// the full distribution, as OpenAI and vLLM do; "llama-server": llama-server's temperature 0.8,
// top-k 40, top-p 0.95, min-p 0.05), then the fields of `override_json` (temperature, top_p,
// top_k, min_p, max_tokens) on top. On bad input: a message that says what to change.
std::variant<GenerationDefaults, std::string> make_generation_defaults(
    std::string_view preset, std::string_view override_json);

// One line for the startup log: what a request that names nothing gets.
std::string describe_generation_defaults(const GenerationDefaults& defaults);

}  // namespace brisk
