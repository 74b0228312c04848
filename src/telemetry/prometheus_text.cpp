#include "telemetry/prometheus_text.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

namespace brisk::telemetry {

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Reads a metric or label name at `pos`; empty when there is none.
std::string read_name(std::string_view line, size_t& pos, bool allow_colon) {
  const size_t start = pos;
  while (pos < line.size() && is_name_char(line[pos]) && (allow_colon || line[pos] != ':')) ++pos;
  if (pos == start || std::isdigit(static_cast<unsigned char>(line[start]))) return {};
  return std::string(line.substr(start, pos - start));
}

void skip_spaces(std::string_view line, size_t& pos) {
  while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
}

// `"value"` with the format's three escapes (\\, \", \n).
std::optional<std::string> read_label_value(std::string_view line, size_t& pos) {
  if (pos >= line.size() || line[pos] != '"') return std::nullopt;
  std::string value;
  for (++pos; pos < line.size(); ++pos) {
    const char c = line[pos];
    if (c == '"') {
      ++pos;
      return value;
    }
    if (c == '\\' && pos + 1 < line.size()) {
      const char escaped = line[++pos];
      value += escaped == 'n' ? '\n' : escaped;
    } else {
      value += c;
    }
  }
  return std::nullopt;  // no closing quote
}

bool read_labels(std::string_view line, size_t& pos, std::map<std::string, std::string>& labels) {
  ++pos;  // '{'
  for (;;) {
    skip_spaces(line, pos);
    if (pos < line.size() && line[pos] == '}') {
      ++pos;
      return true;
    }
    const std::string name = read_name(line, pos, /*allow_colon=*/false);
    skip_spaces(line, pos);
    if (name.empty() || pos >= line.size() || line[pos] != '=') return false;
    ++pos;
    skip_spaces(line, pos);
    const auto value = read_label_value(line, pos);
    if (!value) return false;
    labels[name] = *value;
    skip_spaces(line, pos);
    if (pos < line.size() && line[pos] == ',') ++pos;
    else if (pos >= line.size() || line[pos] != '}') return false;
  }
}

std::optional<double> read_value(std::string_view token) {
  if (token == "+Inf" || token == "Inf") return std::numeric_limits<double>::infinity();
  if (token == "-Inf") return -std::numeric_limits<double>::infinity();
  if (token == "NaN") return std::numeric_limits<double>::quiet_NaN();
  try {
    size_t used = 0;
    const double value = std::stod(std::string(token), &used);
    if (used == token.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<MetricSample> parse_sample_line(std::string_view line) {
  MetricSample sample;
  size_t pos = 0;
  sample.name = read_name(line, pos, /*allow_colon=*/true);
  if (sample.name.empty()) return std::nullopt;
  if (pos < line.size() && line[pos] == '{' && !read_labels(line, pos, sample.labels)) {
    return std::nullopt;
  }
  skip_spaces(line, pos);
  const size_t value_end = line.find_first_of(" \t", pos);
  const auto value = read_value(line.substr(pos, value_end == std::string_view::npos
                                                      ? std::string_view::npos
                                                      : value_end - pos));
  if (!value) return std::nullopt;
  sample.value = *value;
  return sample;  // a trailing timestamp is allowed and ignored
}

}  // namespace

std::optional<MetricFamilyText> parse_prometheus_text(std::string_view text, std::string& error) {
  MetricFamilyText parsed;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t start = 0;
    skip_spaces(line, start);
    const std::string_view content = std::string_view(line).substr(start);
    if (content.empty()) continue;
    if (content[0] == '#') {
      std::istringstream words{std::string(content)};
      std::string hash, keyword, family, type;
      words >> hash >> keyword >> family >> type;
      if (keyword == "TYPE" && !family.empty()) parsed.types[family] = type;
      continue;
    }
    auto sample = parse_sample_line(content);
    if (!sample) {
      error = "line " + std::to_string(number) + " is not a Prometheus sample: " +
              std::string(content.substr(0, 120));
      return std::nullopt;
    }
    parsed.samples.push_back(std::move(*sample));
  }
  return parsed;
}

std::optional<double> sum_samples(const std::vector<MetricSample>& samples, std::string_view name,
                                  const std::map<std::string, std::string>& wanted) {
  std::optional<double> sum;
  for (const MetricSample& sample : samples) {
    if (sample.name != name || std::isnan(sample.value)) continue;
    bool matches = true;
    for (const auto& [key, value] : wanted) {
      const auto it = sample.labels.find(key);
      matches = matches && it != sample.labels.end() && it->second == value;
    }
    if (matches) sum = sum.value_or(0) + sample.value;
  }
  return sum;
}

}  // namespace brisk::telemetry
