#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace brisk {

// One [[model]] table of a `brisk serve --models FILE` (docs/models.md, "The models file").
struct ModelFileEntry {
  std::string model;                 // catalog name or GGUF path
  std::string name;                  // the served name; empty: the model's own
  std::vector<std::string> aliases;  // other names requests may use for it
  bool critical = false;             // its steps go before every other model's
  double weight = 1.0;               // its share of the device beside the others
  bool pinned = false;               // loaded at start, never unloaded
  // Its own serve flags as command-line arguments: `max-seqs = 4` is "--max-seqs=4".
  std::vector<std::string> flag_args;
  int line = 0;  // where its table starts, for messages
};

// The models of a TOML models file, in their order, or why the file cannot be used.
std::variant<std::vector<ModelFileEntry>, std::string> parse_models_file(
    std::string_view text, const std::string& source_name);
std::variant<std::vector<ModelFileEntry>, std::string> read_models_file(
    const std::filesystem::path& path);

}  // namespace brisk
