#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "doctor/evidence.h"
#include "doctor/telemetry_recorder.h"
#include "doctor/verdict.h"

namespace brisk::doctor {

// report.json: {"verdict": {"accelerator_bound", "primary_cause", "summary"}, "findings": [{"id",
// "severity", "summary", "evidence": [{"name", "value", "unit", "source"}], "prescription",
// "impact"}], "measurements": {...}} — documented in docs/doctor.md.
nlohmann::json report_json(const Evidence& evidence, const Diagnosis& diagnosis);

// The verdict first, then the report table (latency, resources, cost) and the ranked findings,
// in Markdown: printed on the terminal and written as report.md.
std::string markdown_report(const Evidence& evidence, const Diagnosis& diagnosis);

// report.html: the same report with offline charts of the probe (Chart.js inlined, as brisk
// bench's report): throughput and TTFT over the ramp, each stage's TTFT, CPU and KV over time.
bool write_doctor_html(const Evidence& evidence, const Diagnosis& diagnosis,
                       const std::vector<TelemetryReading>& timeline,
                       const std::filesystem::path& path, std::string& error);

// The probe points the report's tables list, in the probe's order: every measured one, the
// ramp's first point (the short baseline again) once.
std::vector<const ProbePoint*> reported_points(const Evidence& evidence);

// Best output throughput of the ramp and, with a price, what a million output tokens cost.
double best_output_tokens_per_s(const Evidence& evidence);
// Best embedding throughput of the embeddings probe's ramp, in inputs per second.
double best_inputs_per_s(const Evidence& evidence);

}  // namespace brisk::doctor
