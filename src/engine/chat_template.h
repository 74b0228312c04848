#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct llama_model;
struct common_chat_templates;

namespace brisk {

// A function call the assistant made: `arguments` is JSON text, as OpenAI sends it.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  std::vector<ToolCall> tool_calls{};  // an assistant's calls
  std::string tool_call_id{};        // a tool's answer: the call it answers
  std::string name{};                // a tool's answer: the function's name, when given
};

// A function the model may call: `parameters` is its JSON schema as text ("" when none).
struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters;
};

// The tools of a chat request and how the model may use them (OpenAI's tool_choice):
// auto: it may call them or answer; required: it must call one (a grammar enforces the syntax);
// none: it sees them but must answer. A named function is `required` with only that tool.
struct ChatTools {
  enum class Choice { automatic, required, none };
  std::vector<ToolDefinition> tools;
  Choice choice = Choice::automatic;
  bool parallel_calls = true;
};

class ChatOutputParser;

// A chat rendered for generation. With tools, also what generation and parsing need.
struct ChatPrompt {
  std::string prompt;
  // GBNF the output must follow (the tool-call syntax); empty when free. Under a `required`
  // choice it begins where the template's generation prompt (the assistant turn's opening, which
  // the prompt already ends with) begins, so the constraint is first fed that prompt's tokens.
  // Under `auto` it is lazy: it starts at the template's call marker (a trigger below).
  std::string grammar;
  std::vector<std::string> grammar_trigger_patterns;  // regular expressions, llama.cpp's syntax
  std::vector<int32_t> grammar_trigger_tokens;
  std::string generation_prompt;
  // Strings that end generation besides the model's own end tokens (the template's).
  std::vector<std::string> stops;
  // Turns the generated text into content and tool calls; null when the request has no tools.
  std::shared_ptr<ChatOutputParser> parser;
};

// Turns chat messages into the prompt text a model was trained on.
//
// The GGUF's own template is run as Jinja (llama.cpp's common library), as llama-server
// --jinja, vLLM and Hugging Face transformers do, so the template's own logic holds (a default
// system prompt, role checks). A GGUF without one gets a built-in family by architecture (gemma
// for Gemma, else chatml: llama-server's ChatML fallback is wrong for families with their own
// turn markers); --chat-template names a built-in. Built-ins render with
// llama_chat_apply_template. Safe to use from any thread: rendering reads only the template.
class ChatTemplate {
 public:
  // `requested`: a built-in name, or empty for the GGUF's own; `jinja_file`: a Jinja template
  // file to run instead (wins over both). Null, with `error`, when the chosen template cannot
  // render even one user message (or the file cannot be read or parsed).
  static std::unique_ptr<ChatTemplate> choose(const llama_model* model,
                                              const std::string& requested,
                                              const std::string& jinja_file, std::string* error);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  bool apply(const std::vector<ChatMessage>& messages, std::string* prompt,
             std::string* error) const;
  // `apply` with tools (or a history of tool calls and results): they are rendered by the
  // template's own Jinja, and llama.cpp's chat library picks the model's tool-call syntax, its
  // grammar and its parser. Tools need the GGUF's Jinja template.
  bool render(const std::vector<ChatMessage>& messages, const ChatTools* tools,
              ChatPrompt* rendered, std::string* error) const;
  // Where the template came from, for the startup log.
  const std::string& origin() const { return origin_; }
  bool is_jinja() const { return jinja_ != nullptr; }
  // Whether the template renders tools (its Jinja reads them), so a tool call can be asked for.
  bool renders_tools() const;

 private:
  ChatTemplate() = default;
  bool apply_builtin(const std::vector<ChatMessage>& messages, std::string* prompt,
                     std::string* error) const;

  std::string builtin_;  // a built-in name or template source for llama_chat_apply_template
  std::string origin_;
  struct JinjaDeleter {
    void operator()(common_chat_templates* templates) const;
  };
  // The GGUF's template as a Jinja program, when it has one and it parses; else null.
  std::unique_ptr<common_chat_templates, JinjaDeleter> jinja_;
};

}  // namespace brisk
