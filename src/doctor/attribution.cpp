#include "doctor/attribution.h"

#include <algorithm>

namespace brisk::doctor {

namespace {

std::optional<double> measured(double value) {
  return value >= 0 ? std::optional<double>(value) : std::nullopt;
}

}  // namespace

PhaseAttribution attribute_phases(const ProbePoint& point, const HardwareFloor& floor) {
  PhaseAttribution phases;
  phases.stage = point.stage;
  phases.concurrency = point.concurrency;
  phases.outside_server_ms = measured(point.outside_server_ms_p50);
  phases.server_ttft_ms = measured(point.server_ttft_ms_p50);
  phases.queue_ms = measured(point.server_queue_ms_p50);
  if (phases.server_ttft_ms && phases.queue_ms) {
    // Medians of two distributions can cross by a fraction of a millisecond; prefill is never
    // negative.
    phases.prefill_ms = std::max(0.0, *phases.server_ttft_ms - *phases.queue_ms);
  }
  if (point.itl_ms.count > 0) phases.decode_ms_per_token = point.itl_ms.p50;
  if (floor.decode_ms_per_token > 0) phases.floor_ms_per_token = floor.decode_ms_per_token;
  if (phases.decode_ms_per_token && phases.floor_ms_per_token) {
    phases.decode_over_floor = *phases.decode_ms_per_token / *phases.floor_ms_per_token;
  }
  return phases;
}

}  // namespace brisk::doctor
