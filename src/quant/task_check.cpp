#include "quant/task_check.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace brisk::quant {
namespace {

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Where `word` first occurs in `text` as a whole word (both lowercase), or npos.
size_t find_word(const std::string& text, const std::string& word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !is_word_char(text[at - 1]);
    const size_t end = at + word.size();
    const bool ends = end >= text.size() || !is_word_char(text[end]);
    if (starts && ends) return at;
  }
  return std::string::npos;
}

bool contains_all(const std::vector<std::string>& needles, std::string_view answer) {
  const std::string lower = lowercase(answer);
  return std::all_of(needles.begin(), needles.end(), [&](const std::string& needle) {
    return lower.find(lowercase(needle)) != std::string::npos;
  });
}

bool json_passes(const TaskCheck& check, std::string_view answer) {
  const std::string value = first_json_value(answer);
  if (value.empty()) return false;
  const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
  if (check.required_keys.empty()) return true;
  if (!parsed.is_object()) return false;
  return std::all_of(check.required_keys.begin(), check.required_keys.end(),
                     [&](const std::string& key) { return parsed.contains(key); });
}

// The label named first wins: "positive, not negative" is a positive answer.
bool choice_passes(const TaskCheck& check, std::string_view answer) {
  const std::string lower = lowercase(answer);
  if (check.choices.empty()) return find_word(lower, lowercase(check.label)) != std::string::npos;
  size_t best_at = std::string::npos;
  std::string best;
  for (const std::string& choice : check.choices) {
    const size_t at = find_word(lower, lowercase(choice));
    if (at < best_at) {
      best_at = at;
      best = lowercase(choice);
    }
  }
  return best_at != std::string::npos && best == lowercase(check.label);
}

}  // namespace

std::string check_kind_name(CheckKind kind) {
  switch (kind) {
    case CheckKind::contains:
      return "contains";
    case CheckKind::regex:
      return "regex";
    case CheckKind::json:
      return "json";
    case CheckKind::choice:
      return "choice";
    case CheckKind::refusal:
      return "refusal";
  }
  return "unknown";
}

const std::vector<CheckKind>& all_check_kinds() {
  static const std::vector<CheckKind> kinds = {CheckKind::contains, CheckKind::regex,
                                               CheckKind::json, CheckKind::choice,
                                               CheckKind::refusal};
  return kinds;
}

std::string first_json_value(std::string_view text) {
  for (size_t start = 0; start < text.size(); ++start) {
    if (text[start] != '{' && text[start] != '[') continue;
    // Find the bracket that closes this one, skipping brackets inside strings.
    int depth = 0;
    bool in_string = false;
    for (size_t at = start; at < text.size(); ++at) {
      const char c = text[at];
      if (in_string) {
        if (c == '\\') {
          ++at;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') in_string = true;
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      if (depth == 0) {
        const std::string candidate(text.substr(start, at - start + 1));
        if (nlohmann::json::accept(candidate)) return candidate;
        break;
      }
    }
  }
  return "";
}

bool looks_like_refusal(std::string_view answer) {
  static const std::vector<std::string> phrases = {
      "i can't",         "i cannot",         "i can not",      "i won't",     "i will not",
      "i'm sorry",       "i am sorry",       "i'm unable",     "i am unable", "i'm not able",
      "i am not able",   "as an ai",         "i must decline", "i refuse",    "cannot help with",
      "can't help with", "not able to help", "i apologize"};
  // Curly apostrophes count as straight ones: models write both.
  constexpr std::string_view kCurlyApostrophe = "\xE2\x80\x99";
  std::string lower;
  lower.reserve(answer.size());
  for (size_t at = 0; at < answer.size();) {
    if (answer.substr(at, kCurlyApostrophe.size()) == kCurlyApostrophe) {
      lower.push_back('\'');
      at += kCurlyApostrophe.size();
    } else {
      lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(answer[at++]))));
    }
  }
  return std::any_of(phrases.begin(), phrases.end(), [&](const std::string& phrase) {
    return lower.find(phrase) != std::string::npos;
  });
}

bool check_passes(const TaskCheck& check, std::string_view answer) {
  switch (check.kind) {
    case CheckKind::contains:
      return contains_all(check.needles, answer);
    case CheckKind::regex:
      return check.compiled && std::regex_search(answer.begin(), answer.end(), *check.compiled);
    case CheckKind::json:
      return json_passes(check, answer);
    case CheckKind::choice:
      return choice_passes(check, answer);
    case CheckKind::refusal:
      return looks_like_refusal(answer) == check.refusal_expected;
  }
  return false;
}

}  // namespace brisk::quant
