// report.html of brisk doctor: offline (Chart.js inlined from Debian's libjs-chart.js, like
// brisk bench's report), one file to attach to a ticket.
#include <fstream>

#include <fmt/format.h>

#include "bench/html_page.h"
#include "doctor/doctor_report.h"

namespace brisk::doctor {

using json = nlohmann::json;

namespace {

json chart_data(const Evidence& evidence, const std::vector<TelemetryReading>& timeline) {
  json ramp = json::array();
  for (const ProbePoint& point : evidence.ramp) {
    ramp.push_back({{"x", point.concurrency},
                    {"tps", point.output_tokens_per_s},
                    {"ttft", point.ttft_ms.p50},
                    {"itl", point.itl_ms.p50}});
  }
  json stages = json::array();
  for (const ProbePoint* point : {&evidence.cold, &evidence.short_baseline, &evidence.long_baseline,
                                  &evidence.prefix, &evidence.mixed_short, &evidence.mixed_long}) {
    if (point->measured()) {
      stages.push_back({{"stage", point->stage},
                        {"client", point->ttft_ms.p50},
                        {"server", point->server_ttft_ms_p50 < 0 ? json(nullptr)
                                                                 : json(point->server_ttft_ms_p50)}});
    }
  }
  json series = {{"host", json::array()}, {"server", json::array()}, {"doctor", json::array()},
                 {"kv", json::array()}, {"gpu", json::array()}};
  for (const TelemetryReading& reading : timeline) {
    series["host"].push_back({{"x", reading.t_s}, {"y", reading.host_busy_cores}});
    if (reading.server_cores >= 0) {
      series["server"].push_back({{"x", reading.t_s}, {"y", reading.server_cores}});
    }
    series["doctor"].push_back({{"x", reading.t_s}, {"y", reading.doctor_cores}});
    if (reading.kv_usage) series["kv"].push_back({{"x", reading.t_s}, {"y", *reading.kv_usage}});
    if (!reading.gpu_utilization.empty()) {
      series["gpu"].push_back({{"x", reading.t_s}, {"y", reading.gpu_utilization[0]}});
    }
  }
  return {{"ramp", ramp}, {"stages", stages}, {"timeline", series}};
}

constexpr const char* kScript = R"JS(
const color = i => ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd'][i % 5];
const line = (label, data, i, axis) => ({label, data, borderColor: color(i), backgroundColor: color(i),
  showLine: true, fill: false, yAxisID: axis || 'y'});
const axes = (x, y, y1) => { const s = {x: {type: 'linear', title: {display: true, text: x}},
  y: {title: {display: true, text: y}}};
  if (y1) s.y1 = {position: 'right', title: {display: true, text: y1}, grid: {drawOnChartArea: false}};
  return s; };
new Chart(document.getElementById('ramp'), {type: 'scatter', data: {datasets: [
  line('output tokens/s', DATA.ramp.map(p => ({x: p.x, y: p.tps})), 0),
  line('TTFT p50 ms', DATA.ramp.map(p => ({x: p.x, y: p.ttft})), 1, 'y1'),
  line('ITL p50 ms', DATA.ramp.map(p => ({x: p.x, y: p.itl})), 2, 'y1')]},
  options: {scales: axes('concurrent requests', 'tokens/s', 'ms')}});
new Chart(document.getElementById('stages'), {type: 'bar', data: {labels: DATA.stages.map(s => s.stage),
  datasets: [{label: 'client TTFT p50 ms', data: DATA.stages.map(s => s.client), backgroundColor: color(0)},
             {label: 'server TTFT p50 ms', data: DATA.stages.map(s => s.server), backgroundColor: color(3)}]}});
const t = DATA.timeline;
new Chart(document.getElementById('timeline'), {type: 'scatter', data: {datasets: [
  line('host CPU busy (cores)', t.host, 0), line('server CPU (cores)', t.server, 1),
  line('brisk doctor CPU (cores)', t.doctor, 2), line('KV cache usage', t.kv, 3, 'y1'),
  line('GPU 0 utilization', t.gpu, 4, 'y1')]},
  options: {elements: {point: {radius: 0}}, scales: axes('seconds into the probe', 'cores', 'fraction')}});
)JS";

}  // namespace

bool write_doctor_html(const Evidence& evidence, const Diagnosis& diagnosis,
                       const std::vector<TelemetryReading>& timeline,
                       const std::filesystem::path& path, std::string& error) {
  const std::optional<std::string> chartjs = bench::read_chartjs(error);
  if (!chartjs) return false;
  std::ofstream out(path);
  if (!out) {
    error = "cannot write " + path.string();
    return false;
  }
  const Verdict& verdict = diagnosis.verdict;
  out << "<!doctype html><html><head><meta charset=\"utf-8\"><title>brisk doctor: "
      << bench::html_escape(verdict.primary_cause) << "</title><style>body{font-family:sans-serif;"
      << "max-width:1100px;margin:auto}canvas{max-height:360px}pre{background:#f6f6f6;padding:8px;"
      << "white-space:pre-wrap}.critical{color:#b00}.warning{color:#a60}.info{color:#357}</style>"
      << "<script>" << *chartjs << "</script></head><body>";
  out << "<h1>brisk doctor: " << bench::html_escape(verdict.primary_cause) << "</h1><p><b>"
      << (verdict.accelerator_bound ? "The accelerator is the bottleneck." : "The accelerator is not the fix.")
      << "</b> " << bench::html_escape(verdict.summary) << "</p><h2>Findings</h2><ol>";
  for (const Finding& finding : diagnosis.findings) {
    out << "<li><b class=\"" << severity_name(finding.severity) << "\">"
        << bench::html_escape(finding.id) << "</b> (" << severity_name(finding.severity) << "): "
        << bench::html_escape(finding.summary) << "<ul>";
    for (const EvidenceItem& item : finding.evidence) {
      out << "<li>" << bench::html_escape(item.name) << ": "
          << bench::html_escape(fmt::format("{:.4g} {}", item.value, item.unit)) << " — "
          << bench::html_escape(item.source) << "</li>";
    }
    out << "<li>Fix: " << bench::html_escape(finding.prescription) << "</li></ul></li>";
  }
  out << "</ol><h2>Concurrency ramp</h2><canvas id=\"ramp\"></canvas>"
      << "<h2>Time to first token by probe</h2><canvas id=\"stages\"></canvas>"
      << "<h2>CPU and KV cache during the probe</h2><canvas id=\"timeline\"></canvas>"
      << "<h2>Report</h2><pre>" << bench::html_escape(markdown_report(evidence, diagnosis))
      << "</pre><script>const DATA = " << bench::script_json(chart_data(evidence, timeline))
      << ";" << kScript << "</script></body></html>\n";
  if (!out) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

}  // namespace brisk::doctor
