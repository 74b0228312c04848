#pragma once

#include <string_view>

namespace brisk::quant {

// data/quant-checks.jsonl, compiled in so a lone binary has its default check set.
std::string_view default_dataset_jsonl();

}  // namespace brisk::quant
