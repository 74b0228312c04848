#pragma once

#include <optional>
#include <string>

#include "doctor/evidence.h"

namespace brisk::doctor {

// Where one probe point's time went, phase by phase: client TTFT − server TTFT is the network
// and the HTTP frontend, server TTFT is queue + prefill, and decode runs at some multiple of
// the hardware floor. Each part is nullopt where the server (or brisk plan) did not measure it;
// no part is guessed from another.
struct PhaseAttribution {
  std::string stage;
  int concurrency = 1;
  std::optional<double> outside_server_ms;  // median of client − server TTFT per request
  std::optional<double> server_ttft_ms;     // p50
  std::optional<double> queue_ms;           // p50
  // Server TTFT p50 − queue p50: medians, so that queue + prefill adds up to the server TTFT
  // shown beside them.
  std::optional<double> prefill_ms;
  std::optional<double> decode_ms_per_token;  // ITL p50
  std::optional<double> floor_ms_per_token;
  std::optional<double> decode_over_floor;  // how far decode runs from the limit (1 = at it)
};

PhaseAttribution attribute_phases(const ProbePoint& point, const HardwareFloor& floor);

}  // namespace brisk::doctor
