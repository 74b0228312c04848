#include "bench/length_distribution.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <vector>

#include <fmt/format.h>

namespace brisk::bench {

namespace {

std::optional<int> parse_positive_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

std::vector<std::string_view> split_colons(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t colon = text.find(':', begin);
    parts.push_back(text.substr(begin, colon - begin));
    if (colon == std::string_view::npos) return parts;
    begin = colon + 1;
  }
}

}  // namespace

uint64_t mix_bits(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int LengthDistribution::sample(uint64_t key) const {
  switch (kind) {
    case Kind::fixed:
      return static_cast<int>(a);
    case Kind::uniform: {
      const double span = b - a + 1;
      return static_cast<int>(a + std::floor(unit_interval(mix_bits(key)) * span));
    }
    case Kind::normal: {
      // Box–Muller on two independent uniforms derived from the key.
      const double u1 = 1.0 - unit_interval(mix_bits(key));  // (0, 1]: log(u1) is finite
      const double u2 = unit_interval(mix_bits(key ^ 0x5bd1e995ULL));
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
      return std::max(1, static_cast<int>(std::lround(a + b * z)));
    }
  }
  return static_cast<int>(a);
}

double LengthDistribution::mean() const { return kind == Kind::uniform ? (a + b) / 2 : a; }

int LengthDistribution::longest() const {
  switch (kind) {
    case Kind::fixed:
      return static_cast<int>(a);
    case Kind::uniform:
      return static_cast<int>(b);
    case Kind::normal:
      return static_cast<int>(std::ceil(a + 3 * b));
  }
  return static_cast<int>(a);
}

std::string LengthDistribution::spec() const {
  switch (kind) {
    case Kind::fixed:
      return fmt::format("{:g}", a);
    case Kind::uniform:
      return fmt::format("uniform:{:g}:{:g}", a, b);
    case Kind::normal:
      return fmt::format("normal:{:g}:{:g}", a, b);
  }
  return "";
}

std::optional<LengthDistribution> parse_length_distribution(const std::string& spec,
                                                            std::string& error) {
  const std::vector<std::string_view> parts = split_colons(spec);
  std::vector<int> numbers;
  for (size_t i = parts.size() == 1 ? 0 : 1; i < parts.size(); ++i) {
    const auto number = parse_positive_int(parts[i]);
    if (!number) break;
    numbers.push_back(*number);
  }
  const std::string_view kind = parts.size() == 1 ? "fixed" : parts[0];
  if (kind == "fixed" && numbers.size() == 1) {
    return LengthDistribution::fixed_at(numbers[0]);
  }
  if (kind == "uniform" && numbers.size() == 2) {
    if (numbers[0] > numbers[1]) {
      error = fmt::format("'{}': the lowest length comes first (uniform:{}:{})", spec, numbers[1],
                          numbers[0]);
      return std::nullopt;
    }
    return LengthDistribution{LengthDistribution::Kind::uniform, double(numbers[0]),
                              double(numbers[1])};
  }
  if (kind == "normal" && numbers.size() == 2) {
    return LengthDistribution{LengthDistribution::Kind::normal, double(numbers[0]),
                              double(numbers[1])};
  }
  error = fmt::format(
      "'{}' is not a length: use a positive number of tokens (128), uniform:MIN:MAX "
      "(uniform:64:256) or normal:MEAN:STDDEV (normal:128:32)",
      spec);
  return std::nullopt;
}

}  // namespace brisk::bench
