#pragma once

#include <filesystem>
#include <string>

#include "quant/quant_result.h"

namespace brisk::quant {

// report.html: a self-contained page (Chart.js inlined from Debian's libjs-chart.js, as the bench
// report does; BRISK_CHARTJS overrides the path) with bar charts of divergence, same-top, task
// pass rates, decode speed and memory per model, the gates and the verdict.
bool write_quant_html(const QuantReport& report, const std::filesystem::path& path,
                      std::string* error);

}  // namespace brisk::quant
