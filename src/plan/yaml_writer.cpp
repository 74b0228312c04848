#include "plan/yaml_writer.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace brisk::plan {
namespace {

using Json = nlohmann::ordered_json;

// Words YAML 1.1 (still read by many tools, kubectl's parser among them) takes for booleans
// or null.
bool is_yaml_keyword(std::string_view text) {
  static constexpr std::string_view kKeywords[] = {"y",   "n",    "yes",   "no",   "on",
                                                   "off", "true", "false", "null", "~"};
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(std::begin(kKeywords), std::end(kKeywords), lower) != std::end(kKeywords);
}

// Letters first, then letters, digits and . _ / -: never a number, never a YAML indicator.
bool can_be_plain(std::string_view text) {
  if (text.empty() || is_yaml_keyword(text)) return false;
  if (!std::isalpha(static_cast<unsigned char>(text.front())) && text.front() != '_' &&
      text.front() != '/') {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '/' || c == '-';
  });
}

std::string scalar(const Json& value) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return can_be_plain(text) ? text : value.dump();
  }
  return value.dump();  // numbers, booleans, null
}

bool is_collection(const Json& value) {
  return (value.is_object() || value.is_array()) && !value.empty();
}

// What stands after `key:` or `- ` for anything but a non-empty collection.
std::string leaf(const Json& value) {
  if (value.is_object()) return "{}";
  if (value.is_array()) return "[]";
  return scalar(value);
}

void write(const Json& value, int indent, std::string& out);

// `key: scalar`, or `key:` and the collection below it.
void write_entry(const std::string& key, const Json& value, int indent, std::string& out) {
  out += scalar(Json(key)) + ":";
  if (is_collection(value)) {
    out += "\n";
    // A list under a key sits at the key's own indentation, as kubectl writes it.
    write(value, value.is_array() ? indent : indent + 2, out);
  } else {
    out += ' ';
    out += leaf(value);
    out += '\n';
  }
}

void write(const Json& value, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      out += pad;
      write_entry(key, item, indent, out);
    }
  } else if (value.is_array()) {
    for (const Json& item : value) {
      out += pad + "- ";
      if (item.is_object() && !item.empty()) {
        // The first key follows the dash; the rest line up under it.
        bool first = true;
        for (const auto& [key, member] : item.items()) {
          if (!first) out += pad + "  ";
          first = false;
          write_entry(key, member, indent + 2, out);
        }
      } else if (item.is_array() && !item.empty()) {
        out += "\n";
        write(item, indent + 2, out);
      } else {
        out += leaf(item) + "\n";
      }
    }
  } else {
    out += pad + scalar(value) + "\n";
  }
}

}  // namespace

std::string to_yaml(const nlohmann::ordered_json& value) {
  std::string out;
  write(value, 0, out);
  return out;
}

}  // namespace brisk::plan
