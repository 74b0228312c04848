#include "bench/dataset_workload.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "common/json_nesting.h"

namespace brisk::bench {

using json = nlohmann::json;

namespace {

// Read as int64 and range-checked: get<int>() would wrap 4294967297 around to 1.
std::optional<int> positive_int_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
    return std::nullopt;
  const int64_t value = it->get<int64_t>();
  if (value <= 0 || value > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(value);
}

// Why `object` is not a usable entry, or empty when it is.
std::string entry_problem(const json& object) {
  if (!object.is_object()) return "is not a JSON object";
  const bool has_prompt = object.contains("prompt") && object["prompt"].is_string();
  const bool has_messages =
      object.contains("messages") && object["messages"].is_array() && !object["messages"].empty();
  if (!has_prompt && !has_messages) {
    return "has neither \"prompt\" (a string) nor \"messages\" (a non-empty array)";
  }
  // The messages are copied into every request body: a copy recurses once per level.
  if (has_messages && json_nesting_exceeds(object["messages"])) {
    return fmt::format("has \"messages\" nested more than {} levels deep", kMaxJsonNesting);
  }
  for (const char* key : {"max_tokens", "output_tokens"}) {
    if (object.contains(key) && !positive_int_field(object, key)) {
      return fmt::format("has \"{}\" that is not a positive integer (at most {})", key,
                         std::numeric_limits<int>::max());
    }
  }
  return {};
}

std::string turn_role(const json& turn) {
  for (const char* key : {"from", "role"}) {
    if (turn.contains(key) && turn[key].is_string()) return turn[key].get<std::string>();
  }
  return {};
}

std::string turn_text(const json& turn) {
  for (const char* key : {"value", "content"}) {
    if (turn.contains(key) && turn[key].is_string()) return turn[key].get<std::string>();
  }
  return {};
}

// The first human turn and the reply right after it, when the conversation has both.
std::optional<std::pair<std::string, std::string>> first_exchange(const json& conversation) {
  const json* turns = nullptr;
  for (const char* key : {"conversations", "conversation"}) {
    if (conversation.is_object() && conversation.contains(key) && conversation[key].is_array()) {
      turns = &conversation[key];
    }
  }
  if (!turns) return std::nullopt;
  for (size_t i = 0; i + 1 < turns->size(); ++i) {
    const std::string role = turn_role((*turns)[i]);
    if (role != "human" && role != "user") continue;
    const std::string reply_role = turn_role((*turns)[i + 1]);
    if (reply_role != "gpt" && reply_role != "assistant" && reply_role != "chatgpt") break;
    return std::make_pair(turn_text((*turns)[i]), turn_text((*turns)[i + 1]));
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<DatasetEntry>> load_jsonl_dataset(const std::string& path,
                                                            std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read the dataset file " + path;
    return std::nullopt;
  }
  std::vector<DatasetEntry> entries;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string problem =
        object.is_discarded() ? std::string("is not valid JSON") : entry_problem(object);
    if (!problem.empty()) {
      error = fmt::format(
          "{} line {} {}: each line must be an object such as {{\"prompt\": \"...\"}} or "
          "{{\"messages\": [{{\"role\": \"user\", \"content\": \"...\"}}]}}, optionally with "
          "\"max_tokens\"",
          path, line_number, problem);
      return std::nullopt;
    }
    DatasetEntry entry;
    if (object.contains("messages") && object["messages"].is_array() &&
        !object["messages"].empty()) {
      entry.messages = object["messages"];
    } else {
      entry.prompt = object["prompt"].get<std::string>();
    }
    entry.output_tokens = positive_int_field(object, "max_tokens");
    if (!entry.output_tokens) entry.output_tokens = positive_int_field(object, "output_tokens");
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    error = path + " holds no prompts: write one JSON object per line";
    return std::nullopt;
  }
  return entries;
}

std::optional<std::vector<DatasetEntry>> load_sharegpt_dataset(
    const std::string& path, int wanted, uint64_t seed, const ShareGptLimits& limits,
    const std::function<std::optional<int>(const std::string&)>& count_tokens, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read the ShareGPT file " + path;
    return std::nullopt;
  }
  const json document = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_array()) {
    error = path +
            " is not a ShareGPT file: expected a JSON array of {\"conversations\": [{\"from\": "
            "\"human\", \"value\": ...}, {\"from\": \"gpt\", \"value\": ...}]}";
    return std::nullopt;
  }
  // A seeded Fisher–Yates over indices with the portable mix: the same sample everywhere.
  std::vector<size_t> order(document.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[mix_bits(seed ^ (i * 0x9e3779b97f4a7c15ULL)) % i]);
  }
  auto tokens_of = [&](const std::string& text) {
    const auto counted = count_tokens(text);
    return counted ? *counted : static_cast<int>((text.size() + 3) / 4);
  };
  std::vector<DatasetEntry> entries;
  for (size_t index : order) {
    if (static_cast<int>(entries.size()) >= wanted) break;
    const auto exchange = first_exchange(document[index]);
    if (!exchange) continue;
    const int prompt_tokens = tokens_of(exchange->first);
    const int reply_tokens = tokens_of(exchange->second);
    if (prompt_tokens < limits.min_tokens || reply_tokens < limits.min_tokens ||
        prompt_tokens > limits.max_prompt_tokens ||
        prompt_tokens + reply_tokens > limits.max_total_tokens) {
      continue;
    }
    DatasetEntry entry;
    entry.prompt = exchange->first;
    entry.output_tokens = reply_tokens;
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    error = fmt::format(
        "{} has no usable conversation: each needs a human turn followed by a gpt reply, both "
        "at least {} tokens, the prompt at most {} and both together at most {}",
        path, limits.min_tokens, limits.max_prompt_tokens, limits.max_total_tokens);
    return std::nullopt;
  }
  return entries;
}

DatasetWorkload::DatasetWorkload(std::vector<DatasetEntry> entries, ApiKind kind, std::string model,
                                 TargetEndpoint target, LengthDistribution default_output,
                                 std::optional<LengthDistribution> output_override, uint64_t seed,
                                 bool stream, SamplingOptions sampling)
    : entries_(std::move(entries)),
      kind_(kind),
      model_(std::move(model)),
      target_(std::move(target)),
      default_output_(default_output),
      output_override_(output_override),
      seed_(seed),
      stream_(stream),
      sampling_(std::move(sampling)) {}

CompletionRequest DatasetWorkload::request(int run_index, int request_index) const {
  const DatasetEntry& entry = entries_[static_cast<size_t>(request_index) % entries_.size()];
  const uint64_t key = mix_bits(mix_bits(seed_ ^ static_cast<uint64_t>(run_index)) ^
                                static_cast<uint64_t>(request_index));
  const int output_tokens = output_override_      ? output_override_->sample(key)
                            : entry.output_tokens ? *entry.output_tokens
                                                  : default_output_.sample(key);
  std::string body =
      entry.has_messages()
          ? build_messages_body(model_, entry.messages, output_tokens, stream_, sampling_)
          : build_completion_body(kind_, model_, entry.prompt, output_tokens, stream_, sampling_);
  return CompletionRequest{
      target_.route(completion_route(entry.has_messages() ? ApiKind::chat : kind_)),
      std::move(body), stream_};
}

}  // namespace brisk::bench
