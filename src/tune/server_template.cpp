#include "tune/server_template.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "tune/command_line.h"

namespace brisk::tune {

namespace {

bool valid_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// Calls `on_placeholder(name)` for each {name} of `word`; false with `error` on a stray brace.
template <class OnPlaceholder>
bool scan_placeholders(const std::string& word, std::string& error, OnPlaceholder on_placeholder) {
  for (size_t at = 0; at < word.size(); ++at) {
    if (word[at] == '}') {
      error = fmt::format("'}}' without '{{' in '{}'", word);
      return false;
    }
    if (word[at] != '{') continue;
    const size_t close = word.find('}', at);
    if (close == std::string::npos) {
      error = fmt::format("'{{' without '}}' in '{}'", word);
      return false;
    }
    const std::string name = word.substr(at + 1, close - at - 1);
    if (!valid_name(name)) {
      error = fmt::format("'{{{}}}' in '{}' is not a placeholder: names are letters, digits, _ and -",
                          name, word);
      return false;
    }
    on_placeholder(name);
    at = close;
  }
  return true;
}

std::optional<long> parse_long(std::string_view text) {
  long value = 0;
  const auto [end, code] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (code != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "256..2048" or "1024..4096:1024" as the list of its values.
std::optional<std::vector<std::string>> expand_range(std::string_view text, std::string& error) {
  const size_t dots = text.find("..");
  const size_t colon = text.find(':', dots);
  const auto low = parse_long(text.substr(0, dots));
  const auto high = parse_long(text.substr(dots + 2, colon == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : colon - dots - 2));
  const auto step = colon == std::string_view::npos ? std::optional<long>()
                                                    : parse_long(text.substr(colon + 1));
  const bool has_step = colon != std::string_view::npos;
  const long increment = step.value_or(0);  // 0: powers of two
  if (!low || !high || *low > *high || (has_step && increment < 1) || (!has_step && *low < 1)) {
    error = fmt::format(
        "'{}' is not a range: write LOW..HIGH (powers of two, LOW >= 1) or LOW..HIGH:STEP", text);
    return std::nullopt;
  }
  std::vector<std::string> values;
  for (long value = *low; value <= *high; value = increment > 0 ? value + increment : value * 2) {
    values.push_back(std::to_string(value));
    if (values.size() > 64) {
      error = fmt::format("'{}' has more than 64 values", text);
      return std::nullopt;
    }
  }
  return values;
}

}  // namespace

std::optional<ServerTemplate> parse_server_template(std::string_view command, std::string& error) {
  auto words = split_command_line(command, error);
  if (!words) return std::nullopt;
  if (words->empty()) {
    error = "--server-cmd is empty: give the server's command, e.g. 'llama-server -m {model} "
            "--port {port} -np {slots}'";
    return std::nullopt;
  }
  ServerTemplate server;
  server.words = std::move(*words);
  bool has_port = false;
  for (const std::string& word : server.words) {
    const bool ok = scan_placeholders(word, error, [&](const std::string& name) {
      if (name == "port") has_port = true;
      const bool filled = std::find(kFilledPlaceholders.begin(), kFilledPlaceholders.end(),
                                    name) != kFilledPlaceholders.end();
      if (!filled && std::find(server.placeholders.begin(), server.placeholders.end(), name) ==
                         server.placeholders.end()) {
        server.placeholders.push_back(name);
      }
    });
    if (!ok) {
      error = "--server-cmd: " + error;
      return std::nullopt;
    }
  }
  if (!has_port) {
    error = "--server-cmd has no {port}: tune starts each candidate on a free port of its own, "
            "so the command must say where it goes (e.g. --port {port})";
    return std::nullopt;
  }
  return server;
}

std::optional<std::vector<Knob>> parse_grid(const std::vector<std::string>& specs,
                                            const ServerTemplate& server, std::string& error) {
  std::map<std::string, std::vector<std::string>> values_by_name;
  for (const std::string& spec : specs) {
    const size_t equals = spec.find('=');
    const std::string name = spec.substr(0, equals);
    if (equals == std::string::npos || equals + 1 == spec.size()) {
      error = fmt::format("--grid '{}': write NAME=V1,V2,... or NAME=LOW..HIGH", spec);
      return std::nullopt;
    }
    if (std::find(server.placeholders.begin(), server.placeholders.end(), name) ==
        server.placeholders.end()) {
      error = fmt::format("--grid '{}': --server-cmd has no {{{}}} (its placeholders: {})", spec,
                          name, fmt::join(server.placeholders, ", "));
      return std::nullopt;
    }
    const std::string list = spec.substr(equals + 1);
    std::vector<std::string> values;
    if (list.find("..") != std::string::npos) {
      auto range = expand_range(list, error);
      if (!range) {
        error = fmt::format("--grid '{}': {}", spec, error);
        return std::nullopt;
      }
      values = std::move(*range);
    } else {
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string value = list.substr(start, comma - start);
        if (value.empty()) {
          error = fmt::format("--grid '{}': an empty value", spec);
          return std::nullopt;
        }
        if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
        start = comma + 1;
      }
    }
    values_by_name[name] = std::move(values);
  }
  std::vector<Knob> knobs;
  for (const std::string& name : server.placeholders) {
    const auto values = values_by_name.find(name);
    if (values == values_by_name.end()) {
      error = fmt::format("--server-cmd's {{{}}} has no values: add --grid {}=V1,V2,...", name,
                          name);
      return std::nullopt;
    }
    Knob knob;
    knob.name = name;
    knob.baseline = values->second.front();
    for (const std::string& value : values->second) knob.values.push_back({value, {}});
    knob.effect = "the server's {" + name + "}";
    knobs.push_back(std::move(knob));
  }
  return knobs;
}

std::vector<std::string> render_command(const ServerTemplate& server, const Setting& setting,
                                        const std::map<std::string, std::string>& filled) {
  std::vector<std::string> argv;
  for (const std::string& word : server.words) {
    std::string out;
    for (size_t at = 0; at < word.size(); ++at) {
      const size_t close = word[at] == '{' ? word.find('}', at) : std::string::npos;
      if (close == std::string::npos) {
        out += word[at];
        continue;
      }
      const std::string name = word.substr(at + 1, close - at - 1);
      if (const auto value = setting.find(name); value != setting.end()) {
        out += value->second;
      } else if (const auto fill = filled.find(name); fill != filled.end()) {
        out += fill->second;
      }
      at = close;
    }
    argv.push_back(std::move(out));
  }
  return argv;
}

}  // namespace brisk::tune
