#include "bench/html_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/html_page.h"

namespace brisk::bench {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxCurvePoints = 200;

// An empirical CDF of ascending `values` as [{x: ms, y: fraction}], thinned to at most
// kMaxCurvePoints points.
json cdf_points(const std::vector<double>& values) {
  json points = json::array();
  if (values.empty()) return points;
  const size_t step = std::max<size_t>(1, values.size() / kMaxCurvePoints);
  for (size_t i = 0; i < values.size(); i += step) {
    points.push_back({{"x", values[i]}, {"y", double(i + 1) / double(values.size())}});
  }
  points.push_back({{"x", values.back()}, {"y", 1.0}});
  return points;
}

// Requests in flight (sent, not yet ended) after each send or end, in seconds from run start.
json in_flight_points(const LoadPointOutcome& outcome) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : outcome.run.records) {
    if (r.warmup || r.sent == TimePoint{} || r.end == TimePoint{}) continue;
    events.emplace_back(seconds_between(outcome.run.start, r.sent), +1);
    events.emplace_back(seconds_between(outcome.run.start, r.end), -1);
  }
  std::sort(events.begin(), events.end());
  json points = json::array();
  int in_flight = 0;
  const size_t step = std::max<size_t>(1, events.size() / (2 * kMaxCurvePoints));
  for (size_t i = 0; i < events.size(); ++i) {
    in_flight += events[i].second;
    if (i % step == 0 || i + 1 == events.size()) {
      points.push_back({{"x", events[i].first}, {"y", in_flight}});
    }
  }
  return points;
}

json load_point_data(const LoadPointOutcome& outcome, const std::string& label) {
  const RunStatistics& s = outcome.stats;
  return {{"label", label},
          {"throughput", s.output_token_throughput},
          {"ttft_p50", s.ttft_ms.p50},
          {"ttft_p99", s.ttft_ms.p99},
          {"tpot_p50", s.tpot_ms.p50},
          {"itl_p99", s.itl_ms.p99},
          {"ttft_cdf", cdf_points(s.ttft_samples_ms)},
          {"itl_cdf", cdf_points(s.itl_samples_ms)},
          {"in_flight", in_flight_points(outcome)}};
}

std::string load_label(const LoadPoint& load) {
  if (load.sessions > 0) {
    return std::to_string(load.sessions) + (load.trace ? " sessions of the trace" : " sessions");
  }
  if (!load.open_loop()) return "concurrency " + std::to_string(load.concurrency);
  if (load.trace) {
    std::ostringstream out;
    out.precision(3);
    out << "trace replay (" << load.rate << "/s on average)";
    return out.str();
  }
  if (std::isinf(load.rate)) return "rate inf";
  std::ostringstream out;
  out.precision(3);
  out << "rate " << load.rate << "/s";
  return out.str();
}

// A line such as "uniform:64:256 tokens in, 128 tokens out, 64 requests per load point, sampling
// {} (server defaults)".
std::string workload_summary(const json& workload) {
  auto text = [&](const char* key) {
    const auto it = workload.find(key);
    if (it == workload.end() || it->is_null()) return std::string();
    return html_escape(it->is_string() ? it->get<std::string>() : it->dump());
  };
  std::string summary;
  if (!text("preset").empty()) {
    summary = "preset " + text("preset");
  } else if (!text("trace").empty()) {
    summary = text("trace_format") + " trace " + text("trace") + " (" + text("replayed_requests") +
              " of its " + text("trace_requests") + " requests, time scale " + text("time_scale") +
              ")";
    return summary;
  } else if (!text("dataset").empty()) {
    summary = text("source") + " dataset " + text("dataset") + " (" + text("dataset_entries") +
              " prompts)";
  } else {
    summary =
        text("input_tokens_dist") + " tokens in, " + text("output_tokens_dist") + " tokens out";
  }
  summary += text("duration_s").empty() ? ", " + text("num_requests") + " requests per load point"
                                        : ", " + text("duration_s") + " s per load point";
  const std::string sampling = text("sampling");  // absent in results from before it was recorded
  if (!sampling.empty()) {
    summary += ", sampling " + (sampling == "{}" ? "{} (server defaults)" : sampling);
  }
  const std::string extra_body = text("extra_body");
  if (!extra_body.empty() && extra_body != "{}") summary += ", extra body " + extra_body;
  return summary;
}

std::optional<double> number_at(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// The table the capacity-test reports our users follow ask for, one row per load point: latency
// (TTFT, mean, P95, P99), throughput, errors, goodput and cost, and what the server's /metrics
// counted (its resources as far as bench can see them); charts alone hide the numbers.
std::string numbers_table(const BenchReport& report, const std::vector<std::string>& labels) {
  std::string html =
      "<h2>Numbers per load point</h2><table id=\"numbers\"><thead><tr>"
      "<th rowspan=\"2\">load point</th><th rowspan=\"2\">ok</th><th rowspan=\"2\">failed</th>"
      "<th colspan=\"4\">TTFT ms</th><th colspan=\"4\">E2E ms</th><th colspan=\"2\">TPOT ms</th>"
      "<th rowspan=\"2\">req/s</th><th rowspan=\"2\">output tok/s</th>"
      "<th rowspan=\"2\">goodput req/s</th><th rowspan=\"2\">$ / 1M output tokens</th>"
      "<th colspan=\"2\">server</th></tr><tr>"
      "<th>mean</th><th>p50</th><th>p95</th><th>p99</th>"
      "<th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>p50</th><th>p99</th>"
      "<th>prefix-cache hit %</th><th>preemptions</th></tr></thead><tbody>";
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const LoadPointOutcome& outcome = report.runs[i];
    const RunStatistics& s = outcome.stats;
    html += "<tr><td>" + html_escape(labels[i]) + "</td>" + number_cell(s.ok, 0) +
            number_cell(s.failed, 0);
    html += latency_cells(s.ttft_ms) + latency_cells(s.e2e_ms);
    html += number_cell(sampled(s.tpot_ms, &LatencySummary::p50), 2) +
            number_cell(sampled(s.tpot_ms, &LatencySummary::p99), 2) +
            number_cell(s.request_throughput, 2) + number_cell(s.output_token_throughput) +
            number_cell(report.slo ? std::optional<double>(s.goodput) : std::nullopt, 2);
    std::optional<double> usd;
    if (report.usd_per_hour && s.output_token_throughput > 0) {
      usd = *report.usd_per_hour / 3600.0 / s.output_token_throughput * 1e6;
    }
    const auto hit_rate = number_at(outcome.server, "prefix_cache_hit_rate");
    html += number_cell(usd, 3) +
            number_cell(hit_rate ? std::optional<double>(*hit_rate * 100) : std::nullopt) +
            number_cell(number_at(outcome.server, "preemptions"), 0) + "</tr>";
  }
  return html +
         "</tbody></table><p class=\"note\">— not measured: no SLO (goodput), no price "
         "(cost), or a server without /metrics brisk knows. Latency counts from each "
         "request's scheduled time in open-loop runs, from its sending otherwise "
         "(docs/bench-metrics.md).</p>";
}

// The page's script reads DATA and draws four charts; Chart.js is inlined before it.
constexpr const char* kPageScript = R"JS(
const palette = ['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf'];
const line = (label, data, i, dash) => ({label, data, borderColor: palette[i % palette.length],
  backgroundColor: palette[i % palette.length], showLine: true, pointRadius: 2, borderDash: dash || []});
const axes = (x, y) => ({x: {type: 'linear', title: {display: true, text: x}},
                         y: {type: 'linear', title: {display: true, text: y}, beginAtZero: true}});
const chart = (id, datasets, x, y) => new Chart(document.getElementById(id),
  {type: 'scatter', data: {datasets}, options: {animation: false, scales: axes(x, y)}});
const curve = (key) => DATA.runs.map(r => ({x: r.throughput, y: r[key]}));
chart('curve', [line('TTFT p50 ms', curve('ttft_p50'), 0), line('TTFT p99 ms', curve('ttft_p99'), 1),
                line('TPOT p50 ms', curve('tpot_p50'), 2), line('ITL p99 ms', curve('itl_p99'), 3)],
      'output tokens/s', 'ms');
chart('ttft', DATA.runs.map((r, i) => line(r.label, r.ttft_cdf, i)), 'TTFT ms', 'fraction of requests');
chart('itl', DATA.runs.map((r, i) => line(r.label, r.itl_cdf, i)), 'ITL ms', 'fraction of gaps');
chart('inflight', DATA.runs.map((r, i) => ({...line(r.label, r.in_flight, i), stepped: true})),
      'seconds into the run',
      'requests in flight');
)JS";

}  // namespace

bool write_html_report(const BenchReport& report, const std::filesystem::path& path,
                       std::string& error) {
  const std::optional<std::string> chartjs = read_chartjs(error);
  if (!chartjs) return false;

  json data = {
      {"target", report.target.url}, {"model", report.target.model}, {"runs", json::array()}};
  std::vector<std::string> labels;
  for (const LoadPointOutcome& outcome : report.runs) {
    std::string label = load_label(outcome.run.load);
    // Preset cases share concurrencies (short and long input at each): name the case too.
    if (outcome.workload.contains("case")) {
      label = outcome.workload["case"].get<std::string>() + " (" + label + ")";
    }
    labels.push_back(label);
    data["runs"].push_back(load_point_data(outcome, label));
  }
  std::ofstream out(path);
  // The model name and the URL come from the command line and the server: text, never markup.
  const std::string model = html_escape(report.target.model);
  const std::string url = html_escape(report.target.url);
  out << "<!doctype html><html><head><meta charset=\"utf-8\"><title>brisk bench: " << model
      << "</title><style>body{font-family:sans-serif;margin:2em;}"
      << ".grid{display:grid;grid-template-columns:1fr 1fr;gap:2em;}h2{font-size:1.1em;}"
      << kNumbersTableCss << "</style><script>" << *chartjs << "</script></head><body>"
      << "<h1>brisk bench</h1><p>target " << url << ", model " << model << ", "
      << workload_summary(report.workload) << "</p>" << numbers_table(report, labels)
      << "<div class=\"grid\">"
      << "<div><h2>Latency vs throughput</h2><canvas id=\"curve\"></canvas></div>"
      << "<div><h2>Requests in flight</h2><canvas id=\"inflight\"></canvas></div>"
      << "<div><h2>TTFT (CDF)</h2><canvas id=\"ttft\"></canvas></div>"
      << "<div><h2>ITL (CDF)</h2><canvas id=\"itl\"></canvas></div></div>"
      << "<script>const DATA = " << script_json(data) << ";" << kPageScript
      << "</script></body></html>\n";
  if (!out) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

}  // namespace brisk::bench
