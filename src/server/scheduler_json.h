#pragma once

#include <nlohmann/json.hpp>

#include "sched/scheduler_snapshot.h"

namespace brisk {

// The body of GET /debug/scheduler (docs/metrics.md): the queue, the running set and the KV map.
nlohmann::json scheduler_json(const SchedulerSnapshot& snapshot);

}  // namespace brisk
