#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "common/duration.h"

namespace brisk {

// Lets a seconds flag take a duration as users write one ("90s", "20m", "1h"; a bare number is
// seconds): CLI11 then parses the seconds it hands on, and the flag's own checks still apply.
inline CLI::Validator duration_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::string error;
        const auto seconds = parse_duration_s(text, error);
        if (!seconds) return error;
        text = fmt::format("{}", *seconds);
        return {};
      },
      "DURATION", "duration");
}

}  // namespace brisk
