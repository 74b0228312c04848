#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/knob.h"

namespace brisk::tune {

// Any server's command line with placeholders, for `brisk tune --server-cmd`:
//   llama-server -m {model} --port {port} -np {slots} -b {batch}
// {port} (a free port tune picks per candidate) is required; {host} (127.0.0.1) and {model}
// (--model) are filled in too; every other {name} is a knob whose values --grid lists.
struct ServerTemplate {
  std::vector<std::string> words;         // as split, placeholders still in them
  std::vector<std::string> placeholders;  // the knobs, in order of first appearance
};

inline const std::vector<std::string> kFilledPlaceholders = {"port", "host", "model"};

std::optional<ServerTemplate> parse_server_template(std::string_view command, std::string& error);

// One knob per placeholder from `--grid` specs: "slots=1,4,8" (the first value is the baseline),
// "batch=256..2048" (powers of two from 256 to 2048), "ctx=1024..4096:1024" (steps of 1024).
// Every placeholder needs values; a spec naming no placeholder is an error.
std::optional<std::vector<Knob>> parse_grid(const std::vector<std::string>& specs,
                                            const ServerTemplate& server, std::string& error);

// The command for one candidate: knob placeholders from `setting`, the others from `filled`.
std::vector<std::string> render_command(const ServerTemplate& server, const Setting& setting,
                                        const std::map<std::string, std::string>& filled);

}  // namespace brisk::tune
