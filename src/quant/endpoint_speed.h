#pragma once

#include <chrono>
#include <vector>

#include "quant/dataset.h"
#include "quant/quant_endpoint.h"
#include "quant/quant_result.h"

namespace brisk::quant {

// Measures an endpoint's speed with brisk bench's load runner and client (streamed requests,
// exact client-side times), on the same requests for every endpoint:
//   - concurrency 1: every item once, in order, after one unmeasured warmup request, each
//     generating exactly its max_tokens (ignore_eos), so every endpoint produces as many tokens;
//     TTFT, end-to-end time, and decode tokens/s = tokens after the first / their time;
//   - concurrency N: N streams at once on the shortest item, `concurrent_tokens` tokens each;
//     tokens after each stream's first, over the span from the first first-token to the last end.
// load_ms stays 0: a server's load time cannot be seen over HTTP.
SpeedFigures measure_endpoint_speed(const QuantEndpoint& endpoint,
                                    const std::vector<DatasetItem>& items, int default_max_tokens,
                                    int concurrency, int concurrent_tokens,
                                    std::chrono::milliseconds timeout);

}  // namespace brisk::quant
