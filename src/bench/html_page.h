#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench/run_statistics.h"

namespace brisk::bench {

// The pieces every report.html of brisk (bench, doctor, quant) is made of: one self-contained
// page that opens from disk with no network, so Chart.js is inlined and data rides in a script.

// `text` with &, < and > as character references: text inside an element, never markup (the
// pages put nothing they did not write themselves into an attribute).
std::string html_escape(std::string_view text);

// Chart.js's source, from Debian's libjs-chart.js (/usr/share/javascript/chart.js/chart.min.js;
// BRISK_CHARTJS overrides the path); nullopt with `error` saying what to install.
std::optional<std::string> read_chartjs(std::string& error);

// `data` as JSON to assign inside <script>: "</script>" or "<!--" in a string would end or bend
// the element, so every '<' (only ever inside a JSON string) is written as the escape \u003c.
std::string script_json(const nlohmann::json& data);

// A cell of a numbers table: `value` with `decimals` digits after the point, or an em dash when
// it was not measured (absent or not finite).
std::string number_cell(std::optional<double> value, int decimals = 1);

// `summary`'s `field`, or nullopt when it has no samples (its fields are then 0, not a measure).
std::optional<double> sampled(const LatencySummary& summary, double LatencySummary::*field);

// The four cells the capacity-test tables give every latency: mean, p50, p95, p99 (ms, one
// decimal), em dashes when it has no samples.
std::string latency_cells(const LatencySummary& summary);

// The style of those tables: borders, numbers right-aligned, the first column (a name) left.
inline constexpr const char* kNumbersTableCss =
    "table{border-collapse:collapse;margin:1em 0;}td,th{border:1px solid #ccc;"
    "padding:0.2em 0.5em;text-align:right;}th{background:#f4f4f4;}td:first-child{"
    "text-align:left;}.note{color:#555;font-size:0.9em;}";

}  // namespace brisk::bench
