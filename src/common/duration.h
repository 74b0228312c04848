#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace brisk {

// A duration as users write one on a command line: "90" or "90s" (seconds), "500ms", "20m",
// "1h", "1.5m", or a sum such as "1h30m". Returns seconds; nullopt with `error` saying what a
// valid one looks like.
std::optional<double> parse_duration_s(std::string_view text, std::string& error);

// Seconds back as the shortest text parse_duration_s reads the same ("20m", "90s", "1h30m").
std::string format_duration(double seconds);

}  // namespace brisk
