#include "common/duration.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

namespace brisk {

namespace {

std::optional<double> unit_seconds(std::string_view unit) {
  if (unit.empty() || unit == "s") return 1.0;
  if (unit == "ms") return 1e-3;
  if (unit == "m" || unit == "min") return 60.0;
  if (unit == "h") return 3600.0;
  return std::nullopt;
}

}  // namespace

std::optional<double> parse_duration_s(std::string_view text, std::string& error) {
  const auto invalid = [&](std::string_view why) -> std::optional<double> {
    error = fmt::format("'{}' is not a duration ({}): write e.g. 90, 90s, 500ms, 20m, 1h or 1h30m",
                        text, why);
    return std::nullopt;
  };
  if (text.empty()) return invalid("empty");
  double total = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t number_end = at;
    while (number_end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[number_end])) || text[number_end] == '.')) {
      ++number_end;
    }
    if (number_end == at) return invalid("a number must come first");
    double value = 0;
    const auto [end, code] = std::from_chars(text.data() + at, text.data() + number_end, value);
    if (code != std::errc() || end != text.data() + number_end) return invalid("bad number");
    size_t unit_end = number_end;
    while (unit_end < text.size() && std::isalpha(static_cast<unsigned char>(text[unit_end]))) {
      ++unit_end;
    }
    const auto scale = unit_seconds(text.substr(number_end, unit_end - number_end));
    if (!scale) return invalid("units are ms, s, m and h");
    // Only a number alone may go without a unit: "1h30" could mean 30 s or 30 min.
    if (unit_end == number_end && (at > 0 || unit_end < text.size())) {
      return invalid("a unit is missing");
    }
    total += value * *scale;
    at = unit_end;
  }
  if (!std::isfinite(total)) return invalid("too large");
  return total;
}

std::string format_duration(double seconds) {
  if (seconds < 1) return fmt::format("{}ms", std::round(seconds * 1000));
  const long whole = std::lround(seconds);
  if (std::fabs(seconds - static_cast<double>(whole)) > 1e-9) return fmt::format("{}s", seconds);
  std::string text;
  if (whole >= 3600) text += fmt::format("{}h", whole / 3600);
  if (whole % 3600 >= 60) text += fmt::format("{}m", whole % 3600 / 60);
  if (whole % 60 != 0) text += fmt::format("{}s", whole % 60);
  return text;
}

}  // namespace brisk
