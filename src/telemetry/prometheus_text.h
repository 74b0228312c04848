#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::telemetry {

// One sample of the Prometheus text exposition format 0.0.4: `name{label="value",...} value`.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct MetricFamilyText {
  std::vector<MetricSample> samples;
  std::map<std::string, std::string> types;  // family name → counter, gauge, histogram, ...
};

// Parses a whole /metrics body. A malformed line rejects the scrape (as Prometheus does), with
// `error` naming the line; comments other than TYPE, blank lines and timestamps are accepted.
std::optional<MetricFamilyText> parse_prometheus_text(std::string_view text, std::string& error);

// The sum of every sample named `name` whose labels include all of `wanted` (e.g. one model's
// series, or every label value summed); nullopt when no sample matches.
std::optional<double> sum_samples(const std::vector<MetricSample>& samples, std::string_view name,
                                  const std::map<std::string, std::string>& wanted = {});

}  // namespace brisk::telemetry
