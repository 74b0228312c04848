#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/chat_template.h"

namespace brisk {

// The assistant's message as parsed from the generated text: what it said and the calls it made.
struct ParsedChatMessage {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// One streamed change to that message: text to append to the content, or to one tool call (its
// id and name come once, in its first change; its arguments in pieces).
struct ChatDelta {
  std::string content;
  int tool_call_index = -1;  // >= 0: this change is to that call
  std::string tool_call_id;  // the call's first change only
  std::string tool_call_name;
  std::string arguments;
};

// Turns a request's generated text into content and tool calls with the parser llama.cpp's chat
// library chose for the model's template (ChatTemplate::render makes one per request). Text
// arrives in pieces; each call parses all of it so far and says what changed since the last. A
// change is never taken back: a call's header goes out once its name is whole, and content or
// arguments only grow. One request's, used from one thread at a time.
class ChatOutputParser {
 public:
  ~ChatOutputParser();
  ChatOutputParser(const ChatOutputParser&) = delete;
  ChatOutputParser& operator=(const ChatOutputParser&) = delete;

  // Adds generated text; `final`: the generation has ended, parse what there is as a whole.
  std::vector<ChatDelta> append(const std::string& text, bool final);
  // Everything parsed so far (the whole message after the final append).
  const ParsedChatMessage& message() const { return message_; }

 private:
  friend class ChatTemplate;
  struct Syntax;  // llama.cpp's parser parameters
  // What llama.cpp's chat library chose for the rendered prompt (common_chat_params): the
  // format, the generation prompt, and its PEG parser serialized ("" when the format has none).
  // `parallel_calls` false: only the first call counts (the grammar allows one when it applies;
  // under `auto` a second one the model writes is dropped).
  ChatOutputParser(int format, std::string generation_prompt, const std::string& peg_parser,
                   bool parallel_calls);
  std::vector<ChatDelta> changes_since_last(bool final);
  std::string next_call_id();

  std::unique_ptr<Syntax> syntax_;
  bool parallel_calls_ = true;
  std::vector<std::string> call_ids_;  // kept, so a call keeps its id as the text grows
  std::string text_;
  ParsedChatMessage message_;
  // What has gone out: the content, and per call whether its header went and its arguments.
  std::string content_sent_;
  std::vector<bool> header_sent_;
  std::vector<std::string> arguments_sent_;
};

}  // namespace brisk
