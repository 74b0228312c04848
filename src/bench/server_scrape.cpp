#include "bench/server_scrape.h"

#include <fmt/format.h>

#include "bench/http_fetch.h"
#include "telemetry/prometheus_text.h"

namespace brisk::bench {

std::optional<telemetry::ServerMetrics> scrape_server_metrics(const TargetEndpoint& target,
                                                              const std::string& model,
                                                              std::string* why_absent,
                                                              std::chrono::milliseconds timeout) {
  std::string ignored;
  std::string& why = why_absent ? *why_absent : ignored;
  const FetchResult result = fetch(target, target.route("/metrics"), "", timeout);
  if (!result.ok()) {
    why = result.status == 0 ? "GET /metrics failed: " + result.error
                             : fmt::format("GET /metrics answered HTTP {}", result.status);
    return std::nullopt;
  }
  std::string error;
  const auto parsed = telemetry::parse_prometheus_text(result.body, error);
  if (!parsed) {
    why = "GET /metrics is not Prometheus text: " + error;
    return std::nullopt;
  }
  telemetry::ServerMetrics metrics = telemetry::read_server_metrics(parsed->samples, model);
  if (!metrics.known()) {
    why = "GET /metrics has none of the queue/KV names brisk doctor knows";
    return std::nullopt;
  }
  return metrics;
}

}  // namespace brisk::bench
