#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "plan/capacity_planner.h"

namespace brisk::plan {

// "16 concurrent users", "5 requests/s (Poisson)", "a burst of 8 requests".
std::string load_text(const Workload& workload);
// "ttft_p95 <= 500 ms, tpot_p95 <= 50 ms", or "none".
std::string slo_text(const std::vector<SloLimit>& slo);
// The ranked table and the recommendation with its reasons.
void print_plan(std::ostream& out, const PlanRequest& request, const Plan& plan);
// {"model", "workload", "candidates": [...], "recommendation"} (docs/plan.md has the schema).
nlohmann::json plan_json(const PlanRequest& request, const Plan& plan);
// Every number behind one candidate's prediction, from the model's shape to the queue.
void print_explanation(std::ostream& out, const PlanRequest& request, const Candidate& candidate);

}  // namespace brisk::plan
