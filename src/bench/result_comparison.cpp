#include "bench/result_comparison.h"

#include <algorithm>

#include <fmt/format.h>

namespace brisk::bench {
namespace {

using json = nlohmann::json;

struct Row {
  const char* label;
  const char* metric;  // top-level field of a run
  const char* stat;    // field inside it, or nullptr for a plain number
};

constexpr Row kRows[] = {
    {"TTFT p50 ms", "ttft_ms", "p50"},
    {"TTFT p99 ms", "ttft_ms", "p99"},
    {"ITL p50 ms", "itl_ms", "p50"},
    {"ITL p99 ms", "itl_ms", "p99"},
    {"TPOT p50 ms", "tpot_ms", "p50"},
    {"E2E p50 ms", "e2e_ms", "p50"},
    {"E2E p99 ms", "e2e_ms", "p99"},
    {"output tok/s", "output_token_throughput", nullptr},
    {"requests/s", "request_throughput", nullptr},
};

std::optional<double> number_at(const json& run, const Row& row) {
  if (!run.is_object()) return std::nullopt;
  auto it = run.find(row.metric);
  if (it == run.end()) return std::nullopt;
  const json* value = &*it;
  if (row.stat != nullptr) {
    if (!it->is_object()) return std::nullopt;
    auto stat = it->find(row.stat);
    if (stat == it->end()) return std::nullopt;
    value = &*stat;
  }
  if (!value->is_number()) return std::nullopt;
  return value->get<double>();
}

std::string cell(std::optional<double> value) {
  return value ? fmt::format("{:.1f}", *value) : std::string("-");
}

// What a result says it sent beyond the workload; files written before brisk recorded it say
// nothing, which is not the same as "nothing was sent".
std::string sampling_of(const json& document) {
  const auto workload = document.find("workload");
  if (workload == document.end() || !workload->is_object() || !workload->contains("sampling")) {
    return "sampling not recorded";
  }
  std::string text = "sampling=" + workload->at("sampling").dump();
  const auto extra_body = workload->find("extra_body");
  if (extra_body != workload->end() && !extra_body->empty()) {
    text += " extra_body=" + extra_body->dump();
  }
  return text;
}

// A run's "load" object as text ("{}" when a hand-edited file has none or a run is no object).
std::string load_of(const json& run) {
  const auto load = run.is_object() ? run.find("load") : run.end();
  return load != run.end() ? load->dump() : std::string("{}");
}

bool has_runs(const json& document) {
  return document.is_object() && document.contains("runs") && document["runs"].is_array();
}

}  // namespace

std::string compare_results(const json& first, const json& second, const std::string& first_label,
                            const std::string& second_label, std::string& error) {
  if (!has_runs(first) || !has_runs(second)) {
    error = "not a brisk bench result.json (no \"runs\" array)";
    return {};
  }
  const size_t points = std::min(first["runs"].size(), second["runs"].size());
  const std::string first_sampling = sampling_of(first);
  const std::string second_sampling = sampling_of(second);
  std::string table = fmt::format("A = {} ({})\nB = {} ({})\n", first_label, first_sampling,
                                  second_label, second_sampling);
  if (first_sampling != second_sampling) {
    table += "note: A and B did not send the same sampling parameters\n";
  }
  for (size_t i = 0; i < points; ++i) {
    const json& a = first["runs"][i];
    const json& b = second["runs"][i];
    table += fmt::format("load {}  vs  {}\n", load_of(a), load_of(b));
    table += fmt::format("  {:<14} {:>12} {:>12} {:>9}\n", "metric", "A", "B", "B/A");
    for (const Row& row : kRows) {
      const auto x = number_at(a, row);
      const auto y = number_at(b, row);
      const std::string ratio =
          x && y && *x != 0 ? fmt::format("{:.2f}x", *y / *x) : std::string("-");
      table += fmt::format("  {:<14} {:>12} {:>12} {:>9}\n", row.label, cell(x), cell(y), ratio);
    }
  }
  if (first["runs"].size() != second["runs"].size()) {
    table += fmt::format("(only the first {} load points are in both files)\n", points);
  }
  return table;
}

}  // namespace brisk::bench
