#pragma once

#include <string>

namespace brisk {

enum class LogFormat { text, json };

// Sets up spdlog on stderr. In json format every line is one JSON object
// {"ts", "level", "msg"}; a message that is itself a JSON object is merged in as fields.
// Returns false (and leaves logging as it was) for an unknown level name.
bool configure_logging(LogFormat format, const std::string& level);
LogFormat log_format();

}  // namespace brisk
