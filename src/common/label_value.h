#pragma once

#include <string>
#include <string_view>

namespace brisk {

// `value` as a Prometheus label value (text exposition format 0.0.4): backslash, double quote
// and newline escaped.
inline std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace brisk
