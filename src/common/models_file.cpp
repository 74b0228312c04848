#include "common/models_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace brisk {
namespace {

constexpr const char* kEntryKeys = "model, name, aliases, critical, weight, pinned";

// A flag's value as the command line writes it; nullopt for a table or a date.
std::optional<std::string> flag_value(const toml::node& node) {
  if (const auto* text = node.as_string()) return text->get();
  if (const auto* integer = node.as_integer()) return std::to_string(integer->get());
  if (const auto* number = node.as_floating_point()) return fmt::format("{}", number->get());
  if (const auto* flag = node.as_boolean()) return flag->get() ? "true" : "false";
  if (const auto* list = node.as_array()) {
    std::string joined;
    for (const toml::node& element : *list) {
      const auto value = element.is_array() ? std::nullopt : flag_value(element);
      if (!value) return std::nullopt;
      joined += (joined.empty() ? "" : ",") + *value;
    }
    return joined;
  }
  return std::nullopt;
}

std::variant<ModelFileEntry, std::string> read_entry(const toml::table& table,
                                                     const std::string& where) {
  ModelFileEntry entry;
  entry.line = static_cast<int>(table.source().begin.line);
  for (const auto& [key_node, value] : table) {
    const std::string key(key_node.str());
    const auto fail = [&](const std::string& what) {
      return fmt::format("{}: '{}' {}", where, key, what);
    };
    if (key == "model" || key == "name") {
      const auto* text = value.as_string();
      if (text == nullptr || text->get().empty()) return fail("must be a non-empty string");
      (key == "model" ? entry.model : entry.name) = text->get();
    } else if (key == "aliases") {
      const auto* list = value.as_array();
      if (list == nullptr) return fail("must be a list of strings");
      for (const toml::node& alias : *list) {
        if (!alias.is_string() || alias.as_string()->get().empty()) {
          return fail("must be a list of non-empty strings");
        }
        entry.aliases.push_back(alias.as_string()->get());
      }
    } else if (key == "critical" || key == "pinned") {
      if (!value.is_boolean()) return fail("must be true or false");
      (key == "critical" ? entry.critical : entry.pinned) = value.as_boolean()->get();
    } else if (key == "weight") {
      const std::optional<double> weight = value.value<double>();
      if (!weight || !(*weight > 0) || *weight > 1e6) {
        return fail("must be a number above 0 (its share of the device beside the others)");
      }
      entry.weight = *weight;
    } else {
      const auto text = flag_value(value);
      if (!text) return fail("must be a string, number, boolean or list, as its flag takes");
      entry.flag_args.push_back("--" + key + "=" + *text);
    }
  }
  if (entry.model.empty()) {
    return fmt::format("{}: says no 'model' (a catalog name or a GGUF path); its keys are {} and "
                       "serve flags such as max-seqs",
                       where, kEntryKeys);
  }
  return entry;
}

}  // namespace

std::variant<std::vector<ModelFileEntry>, std::string> parse_models_file(
    std::string_view text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    return fmt::format("{}:{}: {}", source_name, error.source().begin.line, error.description());
  }
  for (const auto& [key, value] : root) {
    if (key.str() != "model") {
      return fmt::format("{}: '{}' is not a key of a models file: each model is a [[model]] "
                         "table",
                         source_name, key.str());
    }
  }
  const toml::array* models = root["model"].as_array();
  if (models == nullptr || models->empty() || !models->is_array_of_tables()) {
    return fmt::format("{}: no [[model]] table: write one per model, e.g.\n[[model]]\nmodel = "
                       "\"gemma3-270m\"\nmax-seqs = 8",
                       source_name);
  }
  std::vector<ModelFileEntry> entries;
  for (const toml::node& node : *models) {
    const toml::table& table = *node.as_table();
    const std::string where = fmt::format("{}:{}: [[model]] {}", source_name,
                                          table.source().begin.line, entries.size() + 1);
    auto entry = read_entry(table, where);
    if (auto* error = std::get_if<std::string>(&entry)) return *error;
    entries.push_back(std::move(std::get<ModelFileEntry>(entry)));
  }
  return entries;
}

std::variant<std::vector<ModelFileEntry>, std::string> read_models_file(
    const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) return fmt::format("cannot read the models file {}", path.string());
  std::stringstream text;
  text << file.rdbuf();
  return parse_models_file(text.str(), path.string());
}

}  // namespace brisk
