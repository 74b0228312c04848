#include "server/rejection_counts.h"

#include <fmt/format.h>

#include "server/metrics_exposition.h"

namespace brisk {

void RejectionCounts::count(const std::string& model, const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++counts_[{model, reason}];
}

std::string RejectionCounts::render_prometheus(bool label_models) const {
  std::string out =
      "# HELP brisk_requests_rejected_total Requests refused before running, by reason.\n"
      "# TYPE brisk_requests_rejected_total counter\n";
  std::lock_guard lock(mutex_);
  if (!label_models) {
    std::map<std::string, uint64_t> by_reason;
    for (const auto& [key, count] : counts_) by_reason[key.second] += count;
    for (const auto& [reason, count] : by_reason) {
      out += fmt::format("brisk_requests_rejected_total{{reason=\"{}\"}} {}\n", reason, count);
    }
    return out;
  }
  for (const auto& [key, count] : counts_) {
    const auto& [model, reason] = key;
    if (model.empty()) {
      out += fmt::format("brisk_requests_rejected_total{{reason=\"{}\"}} {}\n", reason, count);
    } else {
      out += fmt::format("brisk_requests_rejected_total{{model=\"{}\",reason=\"{}\"}} {}\n",
                         escape_label_value(model), reason, count);
    }
  }
  return out;
}

}  // namespace brisk
