#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "quant/task_check.h"

namespace brisk::quant {

// One input of the check set: a plain prompt (completed as text) or a chat (rendered with the
// model's chat template), with the expectations on the answer.
struct DatasetItem {
  std::string id;                     // the line's "id", else "line N"
  std::string category;               // the line's "category" (facts, json, ...), for the report
  std::string prompt;                 // set for a plain prompt
  std::vector<ChatMessage> messages;  // set for a chat
  int max_tokens = 0;                 // 0: the run's --max-tokens
  std::vector<TaskCheck> checks;
  bool is_chat() const { return !messages.empty(); }
};

// Parses JSONL: one object a line, blank lines and lines starting with '#' skipped. Keys:
// "prompt" (string) or "messages" ([{"role", "content"}]); optional "id", "category",
// "max_tokens"; checks "expect_contains" (string or [strings]), "expect_regex" (string),
// "expect_json" (true, or [required keys]), "expect_choice" (label) with optional "choices",
// "expect_refusal" (bool). Any other "expect_*" key is an error, so a typo is not a silent
// no-op. Nullopt with `error` naming the line and what to change.
std::optional<std::vector<DatasetItem>> parse_dataset(const std::string& text,
                                                      const std::string& source,
                                                      std::string* error);
std::optional<std::vector<DatasetItem>> load_dataset(const std::string& path, std::string* error);

}  // namespace brisk::quant
