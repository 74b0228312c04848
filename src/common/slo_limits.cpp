#include "common/slo_limits.h"

#include <fmt/format.h>

namespace brisk {
namespace {

std::optional<double> parse_duration_ms(std::string_view text) {
  double scale = 1.0;
  if (text.ends_with("ms")) {
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
    scale = 1000.0;
  }
  try {
    size_t used = 0;
    const std::string number(text);
    const double value = std::stod(number, &used);
    if (used != number.size() || !(value > 0)) return std::nullopt;
    return value * scale;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<std::vector<SloLimit>> parse_slo_limits(std::string_view text, std::string& error) {
  std::vector<SloLimit> limits;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t equals = item.find('=');
    const size_t underscore = item.find('_');
    if (equals == std::string_view::npos || underscore == std::string_view::npos ||
        underscore > equals) {
      error = fmt::format("'{}' is not METRIC_STAT=LIMIT (e.g. ttft_p99=500ms)", item);
      return std::nullopt;
    }
    SloLimit limit;
    limit.metric = std::string(item.substr(0, underscore));
    limit.stat = std::string(item.substr(underscore + 1, equals - underscore - 1));
    const auto limit_ms = parse_duration_ms(item.substr(equals + 1));
    if (limit.metric != "ttft" && limit.metric != "tpot" && limit.metric != "itl" &&
        limit.metric != "e2e") {
      error = fmt::format("unknown SLO metric '{}' (ttft, tpot, itl or e2e)", limit.metric);
      return std::nullopt;
    }
    if (limit.stat != "mean" && limit.stat != "p50" && limit.stat != "p90" && limit.stat != "p95" &&
        limit.stat != "p99" && limit.stat != "max") {
      error =
          fmt::format("unknown SLO statistic '{}' (mean, p50, p90, p95, p99 or max)", limit.stat);
      return std::nullopt;
    }
    if (!limit_ms) {
      error = fmt::format("'{}' needs a positive limit such as 500ms or 0.5s", item);
      return std::nullopt;
    }
    limit.limit_ms = *limit_ms;
    limits.push_back(limit);
  }
  return limits;
}

}  // namespace brisk
