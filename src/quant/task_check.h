#pragma once

#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::quant {

enum class CheckKind { contains, regex, json, choice, refusal };

// The name used in datasets and reports: "contains", "regex", "json", "choice", "refusal".
std::string check_kind_name(CheckKind kind);
const std::vector<CheckKind>& all_check_kinds();

// One expectation on a model's answer, from a dataset line's `expect_*` key.
struct TaskCheck {
  CheckKind kind = CheckKind::contains;
  std::vector<std::string> needles;  // contains: every one must appear (case-insensitive)
  std::string pattern;               // regex: ECMAScript, searched anywhere
  std::shared_ptr<const std::regex> compiled;
  std::vector<std::string> required_keys;  // json: keys the first JSON object must have
  std::string label;                       // choice: the right label
  std::vector<std::string> choices;        // choice: all labels; the first one named must be right
  bool refusal_expected = true;            // refusal: true = must refuse, false = must answer
};

// Whether `answer` meets the check. Never throws.
bool check_passes(const TaskCheck& check, std::string_view answer);

// Parts of check_passes, exposed for tests.
// The first balanced {...} or [...] in `text` that parses as JSON, or "" if none.
std::string first_json_value(std::string_view text);
// An answer that opens with, or contains, a refusal phrase ("I can't", "I'm sorry", ...).
bool looks_like_refusal(std::string_view answer);

}  // namespace brisk::quant
