#include "bench/html_page.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace brisk::bench {

std::string html_escape(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      default:
        escaped.push_back(c);
    }
  }
  return escaped;
}

std::optional<std::string> read_chartjs(std::string& error) {
  const char* configured = std::getenv("BRISK_CHARTJS");
  const std::filesystem::path path =
      configured ? configured : "/usr/share/javascript/chart.js/chart.min.js";
  std::ifstream file(path);
  if (!file) {
    error = "cannot read Chart.js at " + path.string() +
            " (install Debian's libjs-chart.js, or set BRISK_CHARTJS)";
    return std::nullopt;
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string script_json(const nlohmann::json& data) {
  std::string text;
  for (const char c : data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    if (c == '<')
      text += "\\u003c";
    else
      text.push_back(c);
  }
  return text;
}

std::string number_cell(std::optional<double> value, int decimals) {
  if (!value || !std::isfinite(*value)) return "<td>—</td>";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(decimals);
  out << *value;
  return "<td>" + out.str() + "</td>";
}

std::optional<double> sampled(const LatencySummary& summary, double LatencySummary::*field) {
  if (summary.count == 0) return std::nullopt;
  return summary.*field;
}

std::string latency_cells(const LatencySummary& summary) {
  std::string cells;
  for (double LatencySummary::*field :
       {&LatencySummary::mean, &LatencySummary::p50, &LatencySummary::p95, &LatencySummary::p99}) {
    cells += number_cell(sampled(summary, field));
  }
  return cells;
}

}  // namespace brisk::bench
