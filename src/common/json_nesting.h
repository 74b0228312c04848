#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

namespace brisk {

// nlohmann::json parses any depth (its parser keeps its own stack) but copies, compares and
// dumps a value recursively, one stack frame per level: a value from outside that is nested
// deeper than the stack allows would crash the program there. Such values are refused first.
inline constexpr size_t kMaxJsonNesting = 64;

// True when arrays and objects in `value` nest more than `max_depth` levels deep (a scalar is
// depth 0, [1] is depth 1). Iterative, so it is safe at any depth.
bool json_nesting_exceeds(const nlohmann::json& value, size_t max_depth = kMaxJsonNesting);

}  // namespace brisk
