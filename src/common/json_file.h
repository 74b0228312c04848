#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace brisk {

// Reads and parses a whole JSON file; nullopt with `error` ("cannot read PATH", "PATH is not
// JSON") when it cannot. Never throws.
std::optional<nlohmann::json> read_json_file(const std::string& path, std::string& error);

}  // namespace brisk
