#include "common/json_nesting.h"

#include <utility>
#include <vector>

namespace brisk {

bool json_nesting_exceeds(const nlohmann::json& value, size_t max_depth) {
  std::vector<std::pair<const nlohmann::json*, size_t>> pending = {{&value, 0}};
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth + 1 > max_depth) return true;
    for (const nlohmann::json& child : *node) pending.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace brisk
