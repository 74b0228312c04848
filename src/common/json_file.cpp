#include "common/json_file.h"

#include <filesystem>
#include <fstream>

namespace brisk {

std::optional<nlohmann::json> read_json_file(const std::string& path, std::string& error) {
  // A directory opens as a stream but throws on the first read.
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path) || !in) {
    error = "cannot read " + path + " (not a readable file)";
    return std::nullopt;
  }
  nlohmann::json document = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    error = path + " is not JSON";
    return std::nullopt;
  }
  return document;
}

}  // namespace brisk
