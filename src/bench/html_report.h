#pragma once

#include <filesystem>
#include <string>

#include "bench/bench_report.h"

namespace brisk::bench {

// report.html: a self-contained page (Chart.js inlined, so it opens from disk with no network)
// with the latency-vs-throughput curve across the sweep, TTFT and ITL CDFs per load point and the
// requests in flight over time. Chart.js comes from Debian's libjs-chart.js
// (/usr/share/javascript/chart.js/chart.min.js; BRISK_CHARTJS overrides the path).
bool write_html_report(const BenchReport& report, const std::filesystem::path& path,
                       std::string& error);

}  // namespace brisk::bench
