// report.html of brisk doctor: offline (Chart.js inlined from Debian's libjs-chart.js, like
// brisk bench's report), one file to attach to a ticket.
#include <fstream>

#include <fmt/format.h>

#include "bench/html_page.h"
#include "doctor/doctor_report.h"
#include "doctor/what_if.h"

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
  // The embeddings probe: throughput in inputs/s, latency whole (no first token to wait for).
  for (const EmbeddingPoint& point : evidence.embeddings.ramp) {
    ramp.push_back({{"x", point.concurrency},
                    {"tps", point.inputs_per_s},
                    {"ttft", point.latency_ms.p50},
                    {"itl", nullptr}});
  }
  json labels = evidence.embeddings.probed()
                    ? json{{"tps", "inputs/s"}, {"ttft", "latency p50 ms"}, {"itl", ""}}
                    : json{{"tps", "output tokens/s"}, {"ttft", "TTFT p50 ms"},
                           {"itl", "ITL p50 ms"}};
  json stages = json::array();
  for (const ProbePoint* point : {&evidence.cold, &evidence.short_baseline, &evidence.long_baseline,
                                  &evidence.prefix, &evidence.mixed_short, &evidence.mixed_long}) {
    if (point->measured()) {
      stages.push_back(
          {{"stage", point->stage},
           {"client", point->ttft_ms.p50},
           {"server",
            point->server_ttft_ms_p50 < 0 ? json(nullptr) : json(point->server_ttft_ms_p50)}});
    }
  }
  json series = {{"host", json::array()},
                 {"server", json::array()},
                 {"doctor", json::array()},
                 {"kv", json::array()},
                 {"gpu", json::array()}};
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
  return {{"ramp", ramp}, {"labels", labels}, {"stages", stages}, {"timeline", series}};
}

using bench::html_escape;
using bench::number_cell;

std::optional<double> percent(const std::optional<double>& fraction) {
  return fraction ? std::optional<double>(*fraction * 100) : std::nullopt;
}

std::optional<double> gib(const std::optional<double>& bytes) {
  return bytes ? std::optional<double>(*bytes / (1 << 30)) : std::nullopt;
}

// The embeddings probe's points: latency, throughput, what the batcher did, the resources.
std::string embedding_numbers_table(const Evidence& evidence) {
  std::string html =
      "<h2>Numbers per probe point</h2><table id=\"numbers\"><thead><tr>"
      "<th rowspan=\"2\">probe</th><th rowspan=\"2\">concurrency</th><th rowspan=\"2\">ok</th>"
      "<th rowspan=\"2\">failed</th><th colspan=\"4\">latency ms</th>"
      "<th rowspan=\"2\">inputs/s</th><th colspan=\"4\">batcher (brisk serve's /metrics)</th>"
      "<th colspan=\"2\">CPU cores</th></tr><tr>"
      "<th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>inputs a batch</th>"
      "<th>wait ms</th><th>model ms a batch</th><th>tokenize ms a request</th>"
      "<th>server</th><th>host</th></tr></thead><tbody>";
  std::vector<const EmbeddingPoint*> points = {&evidence.embeddings.cold};
  for (const EmbeddingPoint& point : evidence.embeddings.ramp) points.push_back(&point);
  for (const EmbeddingPoint* point : points) {
    if (!point->measured()) continue;
    const auto& batcher = point->batcher;
    const auto of = [&](double (EmbeddingBatcherDelta::*field)() const) {
      return batcher ? std::optional<double>(((*batcher).*field)()) : std::nullopt;
    };
    html += "<tr><td>" + html_escape(point->stage) + "</td>" + number_cell(point->concurrency, 0) +
            number_cell(point->ok, 0) + number_cell(point->failed, 0) +
            bench::latency_cells(point->latency_ms) + number_cell(point->inputs_per_s) +
            number_cell(of(&EmbeddingBatcherDelta::inputs_per_batch), 2) +
            number_cell(of(&EmbeddingBatcherDelta::window_wait_ms_mean)) +
            number_cell(of(&EmbeddingBatcherDelta::compute_ms_per_batch)) +
            number_cell(of(&EmbeddingBatcherDelta::tokenize_ms_per_request), 2) +
            number_cell(point->resources.server_cores_mean, 2) +
            number_cell(point->resources.host_busy_cores_mean, 2) + "</tr>";
  }
  return html + "</tbody></table><p class=\"note\">— not measured: a server that exports no "
                "batcher counters (only brisk serve does), or not on this machine.</p>";
}

// The table the capacity-test reports our users follow ask for (as brisk bench's report has),
// one row per probe point: latency (TTFT, E2E: mean, p50, p95, p99; ITL), the resources the
// telemetry saw while it ran and, with a price, what its throughput costs. Charts alone hide
// the numbers.
std::string numbers_table(const Evidence& evidence) {
  std::string html =
      "<h2>Numbers per probe point</h2><table id=\"numbers\"><thead><tr>"
      "<th rowspan=\"2\">probe</th><th rowspan=\"2\">concurrency</th><th rowspan=\"2\">ok</th>"
      "<th rowspan=\"2\">failed</th><th colspan=\"4\">TTFT ms</th><th colspan=\"4\">E2E ms</th>"
      "<th colspan=\"2\">ITL ms</th><th rowspan=\"2\">output tok/s</th>"
      "<th colspan=\"2\">accelerator</th><th colspan=\"2\">CPU cores</th>"
      "<th rowspan=\"2\">$ / 1M output tokens</th></tr><tr>"
      "<th>mean</th><th>p50</th><th>p95</th><th>p99</th>"
      "<th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>p50</th><th>p99</th>"
      "<th>utilization %</th><th>memory GiB</th><th>server</th><th>host</th></tr></thead><tbody>";
  for (const ProbePoint* point : reported_points(evidence)) {
    const PointResources& used = point->resources;
    std::optional<double> usd;
    if (evidence.usd_per_hour && point->output_tokens_per_s > 0) {
      usd = *evidence.usd_per_hour / 3600.0 / point->output_tokens_per_s * 1e6;
    }
    html += "<tr><td>" + html_escape(point->stage) + "</td>" + number_cell(point->concurrency, 0) +
            number_cell(point->ok, 0) + number_cell(point->failed, 0) +
            bench::latency_cells(point->ttft_ms) + bench::latency_cells(point->e2e_ms) +
            number_cell(bench::sampled(point->itl_ms, &bench::LatencySummary::p50)) +
            number_cell(bench::sampled(point->itl_ms, &bench::LatencySummary::p99)) +
            number_cell(point->output_tokens_per_s) +
            number_cell(percent(used.gpu_utilization_mean)) +
            number_cell(gib(used.gpu_memory_used_bytes_max), 2) +
            number_cell(used.server_cores_mean, 2) + number_cell(used.host_busy_cores_mean, 2) +
            number_cell(usd, 3) + "</tr>";
  }
  return html +
         "</tbody></table><p class=\"note\">— not measured: no GPU telemetry (NVML), a server "
         "not on this machine, or no --usd-per-hour. Resources are the 250 ms telemetry "
         "readings overlapping each point (accelerator memory: the highest, all GPUs together). "
         "brisk doctor does not judge answer quality (brisk quant does); failed counts the "
         "requests that got no answer.</p>";
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
  line(DATA.labels.tps, DATA.ramp.map(p => ({x: p.x, y: p.tps})), 0),
  line(DATA.labels.ttft, DATA.ramp.map(p => ({x: p.x, y: p.ttft})), 1, 'y1'),
  line(DATA.labels.itl, DATA.ramp.filter(p => p.itl !== null).map(p => ({x: p.x, y: p.itl})), 2, 'y1')]},
  options: {scales: axes('concurrent requests', DATA.labels.tps, 'ms')}});
if (document.getElementById('stages')) new Chart(document.getElementById('stages'), {type: 'bar', data: {labels: DATA.stages.map(s => s.stage),
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
      << html_escape(verdict.primary_cause) << "</title><style>body{font-family:sans-serif;"
      << "max-width:1100px;margin:auto}canvas{max-height:360px}pre{background:#f6f6f6;padding:8px;"
      << "white-space:pre-wrap}.critical{color:#b00}.warning{color:#a60}.info{color:#357}"
      << bench::kNumbersTableCss << "</style><script>" << *chartjs << "</script></head><body>";
  out << "<h1>brisk doctor: " << html_escape(verdict.primary_cause) << "</h1><p><b>"
      << (verdict.accelerator_bound ? "The accelerator is the bottleneck."
                                    : "The accelerator is not the fix.")
      << "</b> " << html_escape(verdict.summary)
      << "</p>";
  if (evidence.embeddings.probed()) {
    out << "<p>Workload: embeddings, " << evidence.embeddings.inputs_per_request
        << " input(s) of " << evidence.embeddings.input_tokens << " tokens a request.</p>"
        << embedding_numbers_table(evidence);
  } else {
    out << "<p>Workload: " << html_escape(describe_probe_lengths(evidence.workload)) << ".</p>"
        << numbers_table(evidence);
  }
  out << "<h2>Findings</h2><ol>";
  for (const Finding& finding : diagnosis.findings) {
    out << "<li><b class=\"" << severity_name(finding.severity) << "\">" << html_escape(finding.id)
        << "</b> (" << severity_name(finding.severity) << "): " << html_escape(finding.summary)
        << "<ul>";
    for (const EvidenceItem& item : finding.evidence) {
      out << "<li>" << html_escape(item.name) << ": "
          << html_escape(fmt::format("{:.4g} {}", item.value, item.unit)) << " — "
          << html_escape(item.source) << "</li>";
    }
    out << "<li>Fix: " << html_escape(finding.prescription) << "</li>";
    if (finding.predicted_effect) {
      out << "<li>Predicted: " << html_escape(describe_predicted_effect(*finding.predicted_effect))
          << "</li>";
    }
    out << "</ul></li>";
  }
  out << "</ol><h2>Concurrency ramp</h2><canvas id=\"ramp\"></canvas>"
      << (evidence.embeddings.probed()
              ? ""
              : "<h2>Time to first token by probe</h2><canvas id=\"stages\"></canvas>")
      << "<h2>CPU and KV cache during the probe</h2><canvas id=\"timeline\"></canvas>"
      << "<h2>Report</h2><pre>" << html_escape(markdown_report(evidence, diagnosis))
      << "</pre><script>const DATA = " << bench::script_json(chart_data(evidence, timeline)) << ";"
      << kScript << "</script></body></html>\n";
  if (!out) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

}  // namespace brisk::doctor
