#include "server/metrics_exposition.h"

#include <algorithm>

namespace brisk {
namespace {

// The metric name a sample line starts with (up to its labels or its value).
std::string_view sample_name(std::string_view line) {
  const size_t end = line.find_first_of("{ ");
  return line.substr(0, end);
}

// "# HELP name ..." or "# TYPE name ...": the family they describe; empty for other comments.
std::string_view described_family(std::string_view line) {
  if (!line.starts_with("# HELP ") && !line.starts_with("# TYPE ")) return {};
  std::string_view rest = line.substr(7);
  return rest.substr(0, rest.find(' '));
}

std::string with_model_label(std::string_view line, std::string_view model) {
  const std::string_view name = sample_name(line);
  std::string out(name);
  out += "{model=\"" + escape_label_value(model) + "\"";
  std::string_view rest = line.substr(name.size());
  if (rest.starts_with("{")) {
    rest.remove_prefix(1);
    if (!rest.starts_with("}")) out += ",";
    out += rest;
  } else {
    out += "}";
    out += rest;
  }
  return out;
}

}  // namespace

MetricsExposition::Family& MetricsExposition::family(std::string_view name) {
  auto found = std::find_if(families_.begin(), families_.end(),
                            [name](const Family& f) { return f.name == name; });
  if (found != families_.end()) return *found;
  families_.push_back(Family{std::string(name), {}, {}});
  return families_.back();
}

void MetricsExposition::add(std::string_view text, std::string_view model) {
  // A sample belongs to the family its part last described: a histogram's _bucket, _sum and
  // _count lines follow their family's TYPE line.
  std::string current;
  bool header_of_new_family = false;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    if (line.starts_with("#")) {
      const std::string_view described = described_family(line);
      if (described.empty()) continue;
      if (described != current) {
        current = std::string(described);
        header_of_new_family = family(current).header.empty();
      }
      if (header_of_new_family) family(current).header.append(line).append("\n");
      continue;
    }
    const std::string_view name = sample_name(line);
    if (current.empty() || !name.starts_with(current)) {
      current = std::string(name);
      header_of_new_family = false;
    }
    Family& target = family(current);
    target.samples += model.empty() ? std::string(line) : with_model_label(line, model);
    target.samples += "\n";
  }
}

std::string MetricsExposition::render() const {
  std::string out;
  for (const Family& f : families_) out += f.header + f.samples;
  return out;
}

}  // namespace brisk
