#include "engine/attention_calls.h"

namespace brisk {

std::vector<AttentionCall> plan_attention_calls(std::span<const int> sequence_of_row,
                                                int max_rows) {
  const int rows = static_cast<int>(sequence_of_row.size());
  if (max_rows <= 0 || rows <= max_rows) return {{0, rows}};
  const auto single = [&](int i) {
    return (i == 0 || sequence_of_row[i - 1] != sequence_of_row[i]) &&
           (i + 1 == rows || sequence_of_row[i + 1] != sequence_of_row[i]);
  };
  int singles = 0;
  while (singles < rows && single(singles)) ++singles;

  std::vector<AttentionCall> calls;
  int per_row = rows;  // rows [0, per_row) go in per-row calls
  if (rows - singles >= kTiledAttentionRows) {
    calls.push_back({singles, rows - singles});
    per_row = singles;
  }
  const int count = (per_row + max_rows - 1) / max_rows;
  for (int k = 0; k < count; ++k) {
    const int first = per_row * k / count;
    calls.push_back({first, per_row * (k + 1) / count - first});
  }
  return calls;
}

}  // namespace brisk
