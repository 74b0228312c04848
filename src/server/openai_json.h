#pragma once

#include <nlohmann/json.hpp>

#include "sched/request.h"

namespace brisk {

// JSON pieces shared by whole responses and stream chunks.
nlohmann::json usage_json(const RequestTimings& timings);
nlohmann::json timings_json(const RequestTimings& timings);
// Never throws on bytes that are not UTF-8 (a model can emit them): they become U+FFFD.
std::string dump_json(const nlohmann::json& value);

}  // namespace brisk
