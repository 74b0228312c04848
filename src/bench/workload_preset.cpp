#include "bench/workload_preset.h"

#include <charconv>
#include <map>

#include <fmt/format.h>

namespace brisk::bench {

namespace {

constexpr const char* kAccepted =
    "use --preset standard, optionally with sizes such as "
    "standard:short=128,long=2048,output=128,low=1,peak=16";

std::optional<int> positive_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

// Applies "key=value,key=value" to `sizes`; false with `error` on an unknown key or bad value.
bool apply_overrides(std::string_view text, std::map<std::string, int>& sizes, std::string& error) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t equals = item.find('=');
    const std::string key(item.substr(0, equals));
    const auto value =
        equals == std::string_view::npos ? std::nullopt : positive_int(item.substr(equals + 1));
    if (!sizes.count(key) || !value) {
      error = fmt::format(
          "'{}' is not a preset size (short, long, output, low or peak = a "
          "positive integer): {}",
          item, kAccepted);
      return false;
    }
    sizes[key] = *value;
  }
  return true;
}

}  // namespace

std::optional<std::vector<PresetCase>> parse_workload_preset(const std::string& spec,
                                                             std::string& error) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  if (name != "standard") {
    error = fmt::format("unknown preset '{}': {}", name, kAccepted);
    return std::nullopt;
  }
  std::map<std::string, int> sizes = {
      {"short", 128}, {"long", 2048}, {"output", 128}, {"low", 1}, {"peak", 16}};
  if (colon != std::string::npos &&
      !apply_overrides(std::string_view(spec).substr(colon + 1), sizes, error)) {
    return std::nullopt;
  }
  std::vector<PresetCase> cases;
  for (const char* input : {"short", "long"}) {
    for (const char* level : {"low", "peak"}) {
      cases.push_back({fmt::format("{}_input_{}_concurrency", input, level), sizes[input],
                       sizes["output"], sizes[level]});
    }
  }
  return cases;
}

}  // namespace brisk::bench
