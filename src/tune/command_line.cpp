#include "tune/command_line.h"

namespace brisk::tune {

std::optional<std::vector<std::string>> split_command_line(std::string_view text,
                                                           std::string& error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        word += text[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) {
    error = std::string("unclosed ") + (quote == '"' ? "double" : "single") + " quote in '" +
            std::string(text) + "'";
    return std::nullopt;
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::optional<std::string> take_flag(std::vector<std::string>& args,
                                     const std::vector<std::string>& names) {
  std::optional<std::string> value;
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    bool taken = false;
    for (const std::string& name : names) {
      if (args[i] == name && i + 1 < args.size()) {
        value = args[++i];
        taken = true;
      } else if (args[i].rfind(name + "=", 0) == 0) {
        value = args[i].substr(name.size() + 1);
        taken = true;
      }
      if (taken) break;
    }
    if (!taken) kept.push_back(args[i]);
  }
  args = std::move(kept);
  return value;
}

bool take_switch(std::vector<std::string>& args, const std::string& name) {
  const size_t before = args.size();
  std::erase(args, name);
  return args.size() != before;
}

}  // namespace brisk::tune
