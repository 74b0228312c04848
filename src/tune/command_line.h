#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::tune {

// Splits a command line into words as a POSIX shell would for plain commands: blanks separate
// words, '…' and "…" quote, a backslash escapes the next character. No variables, globs or
// pipes: tune runs the words itself. nullopt with `error` on an unclosed quote.
std::optional<std::vector<std::string>> split_command_line(std::string_view text,
                                                           std::string& error);

// Removes `--flag VALUE` and `--flag=VALUE` (any of `names`) from `args` and returns the last
// value given; a name in `switches` takes no value (--no-kv-unified).
std::optional<std::string> take_flag(std::vector<std::string>& args,
                                     const std::vector<std::string>& names);
bool take_switch(std::vector<std::string>& args, const std::string& name);

}  // namespace brisk::tune
