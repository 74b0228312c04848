#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "quant/quant_result.h"

namespace brisk::quant {

// report.json, whose shape docs/quant.md documents and keeps stable: "reference", "settings",
// "gates", "candidates" (name, file, passed, failed_gates, kld, same_top, ppl_ratio, tasks, flips,
// speed, memory, ...), "verdict" {choice, summary}, "notes".
nlohmann::json report_json(const QuantReport& report);

// The terminal table: one row per model, then the verdict.
void print_report_table(std::ostream& out, const QuantReport& report);

// report.md: the same figures, the gates per candidate and every flip with both answers.
std::string report_markdown(const QuantReport& report);

// Writes report.json, report.md and report.html into `dir` (created if missing).
bool write_report_files(const QuantReport& report, const std::filesystem::path& dir,
                        std::string* error);

}  // namespace brisk::quant
