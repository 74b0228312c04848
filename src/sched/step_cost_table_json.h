#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sched/step_costs.h"

namespace brisk {

// A StepCostTable as JSON: {"decode_ms_by_batch": [{"batch", "ms"}], "prefill_ms_per_token",
// "row_cell_ms"}. GET /debug/scheduler shows a server's this way and calibration.json stores
// a calibrated model's this way; `brisk plan calibrate --from-server` reads the one into the other.
nlohmann::json step_cost_table_json(const StepCostTable& table);
// nullopt with `error` naming what is missing or of the wrong type.
std::optional<StepCostTable> step_cost_table_from_json(const nlohmann::json& json,
                                                       std::string* error);

}  // namespace brisk
