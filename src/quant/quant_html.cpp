#include "quant/quant_html.h"

#include <fstream>

#include "bench/html_page.h"
#include "quant/quant_report.h"

namespace brisk::quant {
namespace {

// The report's figures for the page's script.
std::string page_data(const QuantReport& report) {
  nlohmann::json data = report_json(report);
  data["reference"].erase("answers");
  for (auto& candidate : data["candidates"]) candidate.erase("answers");
  return bench::script_json(data);
}

constexpr const char* kScript = R"JS(
const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b'];
const names = DATA.candidates.map(c => c.name);
const models = [DATA.reference.name + ' (ref)'].concat(names);
const bars = (id, labels, label, values, y) => new Chart(document.getElementById(id), {
  type: 'bar',
  data: {labels, datasets: [{label, data: values, backgroundColor: labels.map((_, i) => palette[i % palette.length])}]},
  options: {animation: false, plugins: {legend: {display: false}, title: {display: true, text: label}},
            scales: {y: {beginAtZero: true, title: {display: true, text: y}}}}});
const approx = DATA.mode === 'endpoints' ? ' (approximate, top-N logprobs)' : '';
bars('kld', names, 'KLD mean (nats/token)' + approx, DATA.candidates.map(c => c.kld.mean), 'nats');
bars('kld99', names, 'KLD p99 (nats/token)' + approx, DATA.candidates.map(c => c.kld.p99), 'nats');
bars('same', names, 'same top token (%)', DATA.candidates.map(c => 100 * c.same_top), '%');
bars('tasks', models, 'task checks passed (%)',
     [DATA.candidates.length ? 100 * DATA.candidates[0].tasks.reference_pass_rate : 0]
       .concat(DATA.candidates.map(c => 100 * c.tasks.candidate_pass_rate)), '%');
bars('speed', models, 'decode tokens/s, concurrency 1',
     [DATA.reference.speed.decode_tokens_per_s].concat(DATA.candidates.map(c => c.speed.decode_tokens_per_s)), 'tokens/s');
bars('memory', models, 'memory allocated at the context (MiB)',
     [DATA.reference].concat(DATA.candidates).map(m => m.memory ? m.memory.allocated_bytes / 1048576 : null), 'MiB');
)JS";

}  // namespace

bool write_quant_html(const QuantReport& report, const std::filesystem::path& path,
                      std::string* error) {
  const std::optional<std::string> chartjs = bench::read_chartjs(*error);
  if (!chartjs) return false;
  std::ofstream page(path);
  if (!page) {
    *error = "cannot write " + path.string();
    return false;
  }
  page << "<!doctype html><html><head><meta charset=\"utf-8\"><title>brisk quant</title>"
       << "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
       << ".grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}"
       << "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>"
       << "<script>" << *chartjs << "</script></head><body>"
       << "<h1>brisk quant</h1><p>Reference: " << bench::html_escape(report.reference.file)
       << "</p><p><b>Verdict:</b> " << bench::html_escape(report.verdict.summary) << "</p>";
  page << "<table><tr><th>candidate</th><th>gates</th></tr>";
  for (const CandidateResult& candidate : report.candidates) {
    std::string gates;
    for (const GateOutcome& outcome : candidate.gates) {
      gates += (outcome.passed       ? "pass "
                : outcome.measured() ? "FAIL "
                                     : "NOT MEASURED ") +
               outcome.gate.text() + "; ";
    }
    page << "<tr><td>" << bench::html_escape(candidate.run.name) << "</td><td>"
         << bench::html_escape(gates) << "</td></tr>";
  }
  page << "</table><ul>";
  for (const std::string& note : report.notes)
    page << "<li>" << bench::html_escape(note) << "</li>";
  page << "</ul><div class=\"grid\">";
  for (const char* id : {"kld", "kld99", "same", "tasks", "speed", "memory"}) {
    page << "<div><canvas id=\"" << id << "\"></canvas></div>";
  }
  page << "</div><script>const DATA = " << page_data(report) << ";" << kScript
       << "</script></body></html>\n";
  return static_cast<bool>(page);
}

}  // namespace brisk::quant
