#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace brisk::plan {

// `value` as block-style YAML (what `kubectl apply` and people read), keys in their insertion
// order. A string is written plain only where YAML cannot read it as anything but that string
// (no number, boolean, null or special character); every other string is double-quoted with
// JSON's escapes, which YAML's double-quoted style shares.
std::string to_yaml(const nlohmann::ordered_json& value);

}  // namespace brisk::plan
