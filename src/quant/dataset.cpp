#include "quant/dataset.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace brisk::quant {
namespace {

using nlohmann::json;

struct LineContext {
  std::string where;  // "FILE line N"
  std::string* error;
  bool fail(const std::string& message) const {
    *error = where + ": " + message;
    return false;
  }
};

bool string_list(const json& value, std::vector<std::string>* out) {
  if (value.is_string()) {
    out->push_back(value.get<std::string>());
    return true;
  }
  if (!value.is_array() || value.empty()) return false;
  for (const json& element : value) {
    if (!element.is_string()) return false;
    out->push_back(element.get<std::string>());
  }
  return true;
}

bool parse_messages(const json& value, DatasetItem* item, const LineContext& line) {
  if (!value.is_array() || value.empty()) {
    return line.fail("\"messages\" must be a non-empty array of {\"role\", \"content\"}");
  }
  for (const json& message : value) {
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string() ||
        !message.contains("content") || !message["content"].is_string()) {
      return line.fail("each message needs string \"role\" and \"content\"");
    }
    item->messages.push_back(
        {message["role"].get<std::string>(), message["content"].get<std::string>()});
  }
  return true;
}

bool parse_check(const std::string& key, const json& value, const json& object, DatasetItem* item,
                 const LineContext& line) {
  TaskCheck check;
  if (key == "expect_contains") {
    check.kind = CheckKind::contains;
    if (!string_list(value, &check.needles)) {
      return line.fail("expect_contains must be a string or a non-empty array of strings");
    }
  } else if (key == "expect_regex") {
    check.kind = CheckKind::regex;
    if (!value.is_string()) return line.fail("expect_regex must be a string");
    check.pattern = value.get<std::string>();
    try {
      check.compiled = std::make_shared<const std::regex>(check.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return line.fail("expect_regex '" + check.pattern +
                       "' is not a valid ECMAScript regular expression (" + e.what() + ")");
    }
  } else if (key == "expect_json") {
    check.kind = CheckKind::json;
    if (value.is_boolean()) {
      if (!value.get<bool>()) return line.fail("expect_json false checks nothing; remove it");
    } else if (!string_list(value, &check.required_keys)) {
      return line.fail("expect_json must be true or an array of required key names");
    }
  } else if (key == "expect_choice") {
    check.kind = CheckKind::choice;
    if (!value.is_string() || value.get<std::string>().empty()) {
      return line.fail("expect_choice must be the right label, a non-empty string");
    }
    check.label = value.get<std::string>();
    if (object.contains("choices")) {
      if (!string_list(object["choices"], &check.choices)) {
        return line.fail("\"choices\" must be an array of label strings");
      }
      if (std::find(check.choices.begin(), check.choices.end(), check.label) ==
          check.choices.end()) {
        return line.fail("expect_choice '" + check.label + "' is not among \"choices\"");
      }
    }
  } else if (key == "expect_refusal") {
    check.kind = CheckKind::refusal;
    if (!value.is_boolean()) return line.fail("expect_refusal must be true or false");
    check.refusal_expected = value.get<bool>();
  } else {
    return line.fail("unknown check '" + key +
                     "' (known: expect_contains, expect_regex, expect_json, expect_choice, "
                     "expect_refusal)");
  }
  item->checks.push_back(std::move(check));
  return true;
}

bool parse_item(const json& object, DatasetItem* item, const LineContext& line) {
  if (!object.is_object()) return line.fail("each line must be a JSON object");
  const bool has_prompt = object.contains("prompt");
  const bool has_messages = object.contains("messages");
  if (has_prompt == has_messages) {
    return line.fail("give exactly one of \"prompt\" (a string) or \"messages\" (a chat)");
  }
  if (has_prompt) {
    if (!object["prompt"].is_string() || object["prompt"].get<std::string>().empty()) {
      return line.fail("\"prompt\" must be a non-empty string");
    }
    item->prompt = object["prompt"].get<std::string>();
  } else if (!parse_messages(object["messages"], item, line)) {
    return false;
  }
  if (object.contains("id")) {
    if (!object["id"].is_string()) return line.fail("\"id\" must be a string");
    item->id = object["id"].get<std::string>();
  }
  if (object.contains("category")) {
    if (!object["category"].is_string()) return line.fail("\"category\" must be a string");
    item->category = object["category"].get<std::string>();
  }
  if (object.contains("max_tokens")) {
    if (!object["max_tokens"].is_number_integer() || object["max_tokens"].get<int>() < 1) {
      return line.fail("\"max_tokens\" must be a positive integer");
    }
    item->max_tokens = object["max_tokens"].get<int>();
  }
  for (const auto& [key, value] : object.items()) {
    if (key.rfind("expect_", 0) == 0 && !parse_check(key, value, object, item, line)) return false;
  }
  if (object.contains("choices") && !object.contains("expect_choice")) {
    return line.fail("\"choices\" needs \"expect_choice\" (the right label)");
  }
  return true;
}

}  // namespace

std::optional<std::vector<DatasetItem>> parse_dataset(const std::string& text,
                                                      const std::string& source,
                                                      std::string* error) {
  std::vector<DatasetItem> items;
  std::set<std::string> ids;
  std::istringstream lines(text);
  std::string raw;
  for (int number = 1; std::getline(lines, raw); ++number) {
    const size_t first = raw.find_first_not_of(" \t\r");
    if (first == std::string::npos || raw[first] == '#') continue;
    const LineContext line{source + " line " + std::to_string(number), error};
    const json object = json::parse(raw, nullptr, false);
    if (object.is_discarded()) {
      line.fail("not valid JSON (one JSON object per line)");
      return std::nullopt;
    }
    DatasetItem item;
    item.id = "line " + std::to_string(number);
    if (!parse_item(object, &item, line)) return std::nullopt;
    if (!ids.insert(item.id).second) {
      line.fail("id '" + item.id + "' is used twice; ids name items in the report");
      return std::nullopt;
    }
    items.push_back(std::move(item));
  }
  if (items.empty()) {
    *error = source + " has no items: give one JSON object a line, with \"prompt\" or \"messages\"";
    return std::nullopt;
  }
  return items;
}

std::optional<std::vector<DatasetItem>> load_dataset(const std::string& path, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    *error = "cannot read --dataset '" + path + "' (does the file exist?)";
    return std::nullopt;
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_dataset(text.str(), path, error);
}

}  // namespace brisk::quant
