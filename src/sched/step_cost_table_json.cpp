#include "sched/step_cost_table_json.h"

namespace brisk {

nlohmann::json step_cost_table_json(const StepCostTable& table) {
  nlohmann::json decode = nlohmann::json::array();
  for (const auto& [batch, ms] : table.decode_ms_by_batch) {
    decode.push_back({{"batch", batch}, {"ms", ms}});
  }
  return {{"decode_ms_by_batch", decode},
          {"prefill_ms_per_token", table.prefill_ms_per_token},
          {"small_chunk_prefill_ms_per_token", table.small_chunk_prefill_ms_per_token},
          {"row_cell_ms", table.row_cell_ms}};
}

std::optional<StepCostTable> step_cost_table_from_json(const nlohmann::json& json,
                                                       std::string* error) {
  const auto fail = [&](const std::string& what) -> std::optional<StepCostTable> {
    *error = "step costs: " + what;
    return std::nullopt;
  };
  if (!json.is_object()) return fail("not an object");
  const auto number = [&](const char* name, double& out) {
    const auto found = json.find(name);
    if (found == json.end() || !found->is_number()) return false;
    out = found->get<double>();
    return true;
  };
  StepCostTable table;
  if (!number("prefill_ms_per_token", table.prefill_ms_per_token)) {
    return fail("no number prefill_ms_per_token");
  }
  if (!number("row_cell_ms", table.row_cell_ms)) return fail("no number row_cell_ms");
  // Tables stored before it was measured have none: priced as prefill_ms_per_token.
  number("small_chunk_prefill_ms_per_token", table.small_chunk_prefill_ms_per_token);
  const auto decode = json.find("decode_ms_by_batch");
  if (decode == json.end() || !decode->is_array()) return fail("no array decode_ms_by_batch");
  for (const auto& point : *decode) {
    if (!point.is_object() || !point.contains("batch") || !point["batch"].is_number_integer() ||
        !point.contains("ms") || !point["ms"].is_number()) {
      return fail("decode_ms_by_batch holds something else than {\"batch\": int, \"ms\": number}");
    }
    table.decode_ms_by_batch[point["batch"].get<int>()] = point["ms"].get<double>();
  }
  return table;
}

}  // namespace brisk
