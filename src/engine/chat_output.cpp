#include "engine/chat_output.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <random>

#ifdef BRISK_HAVE_LLAMA_COMMON
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "chat.h"
#pragma GCC diagnostic pop
#endif

namespace brisk {

#ifdef BRISK_HAVE_LLAMA_COMMON
struct ChatOutputParser::Syntax {
  common_chat_parser_params params;
};
#else
struct ChatOutputParser::Syntax {};
#endif

ChatOutputParser::ChatOutputParser(int format, std::string generation_prompt,
                                   const std::string& peg_parser, bool parallel_calls)
    : syntax_(std::make_unique<Syntax>()), parallel_calls_(parallel_calls) {
#ifdef BRISK_HAVE_LLAMA_COMMON
  syntax_->params.format = static_cast<common_chat_format>(format);
  syntax_->params.generation_prompt = std::move(generation_prompt);
  syntax_->params.parse_tool_calls = true;
  if (!peg_parser.empty()) syntax_->params.parser.load(peg_parser);
#else
  (void)format;
  (void)generation_prompt;
  (void)peg_parser;
#endif
}

ChatOutputParser::~ChatOutputParser() = default;

// OpenAI's shape: "call_" and 24 letters and digits.
std::string ChatOutputParser::next_call_id() {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 generator(std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(generator)];
  return id;
}

std::vector<ChatDelta> ChatOutputParser::append(const std::string& text, bool final) {
  text_ += text;
#ifdef BRISK_HAVE_LLAMA_COMMON
  try {
    const common_chat_msg parsed = common_chat_parse(text_, !final, syntax_->params);
    ParsedChatMessage next;
    next.content = parsed.content;
    const size_t calls = parallel_calls_ ? parsed.tool_calls.size()
                                         : std::min<size_t>(parsed.tool_calls.size(), 1);
    for (size_t i = 0; i < calls; ++i) {
      const common_chat_tool_call& call = parsed.tool_calls[i];
      if (call_ids_.size() <= i) call_ids_.push_back(call.id.empty() ? next_call_id() : call.id);
      next.tool_calls.push_back({call_ids_[i], call.name, call.arguments});
    }
    // A partial parse may see fewer calls than before (a call it cannot place yet): keep what
    // went out, wait for more text.
    if (next.tool_calls.size() >= message_.tool_calls.size()) message_ = std::move(next);
  } catch (const std::exception& e) {
    // A partial text that does not parse yet waits for more; a whole one that does not parse
    // as the template's syntax is the model's answer in prose.
    if (final && message_.tool_calls.empty()) message_.content = text_;
    if (final) spdlog::debug("the output did not parse as tool calls ({}); kept as text", e.what());
  }
#else
  message_.content = text_;
#endif
  return changes_since_last(final);
}

std::vector<ChatDelta> ChatOutputParser::changes_since_last(bool final) {
  std::vector<ChatDelta> changes;
  // Only growth goes out: a partial parse that rewrote what was sent waits for the text to agree.
  const auto grows = [](const std::string& now, const std::string& sent) {
    return now.size() > sent.size() && now.compare(0, sent.size(), sent) == 0;
  };
  if (grows(message_.content, content_sent_)) {
    ChatDelta delta;
    delta.content = message_.content.substr(content_sent_.size());
    content_sent_ = message_.content;
    changes.push_back(std::move(delta));
  }
  header_sent_.resize(message_.tool_calls.size(), false);
  arguments_sent_.resize(message_.tool_calls.size());
  for (size_t i = 0; i < message_.tool_calls.size(); ++i) {
    const ToolCall& call = message_.tool_calls[i];
    // The name is whole once arguments have begun, a later call exists, or the text ended.
    const bool name_whole = !call.arguments.empty() || i + 1 < message_.tool_calls.size() || final;
    if (!header_sent_[i]) {
      if (!name_whole || call.name.empty()) break;
      ChatDelta header;
      header.tool_call_index = static_cast<int>(i);
      header.tool_call_id = call.id;
      header.tool_call_name = call.name;
      header_sent_[i] = true;
      changes.push_back(std::move(header));
    }
    if (grows(call.arguments, arguments_sent_[i])) {
      ChatDelta arguments;
      arguments.tool_call_index = static_cast<int>(i);
      arguments.arguments = call.arguments.substr(arguments_sent_[i].size());
      arguments_sent_[i] = call.arguments;
      changes.push_back(std::move(arguments));
    }
  }
  return changes;
}

}  // namespace brisk
