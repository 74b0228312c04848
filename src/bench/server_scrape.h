#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "bench/target_endpoint.h"
#include "telemetry/server_metrics.h"

namespace brisk::bench {

// GET /metrics of the server under test, read in the names brisk knows (brisk, vLLM, SGLang,
// TGI, llama.cpp); with several models on the server, those of `model`. nullopt when it has no
// such metrics, with `why_absent` (when given) saying what was wrong: the request failed, the
// answer is not Prometheus text, or it names nothing brisk reads.
std::optional<telemetry::ServerMetrics> scrape_server_metrics(
    const TargetEndpoint& target, const std::string& model, std::string* why_absent = nullptr,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

}  // namespace brisk::bench
