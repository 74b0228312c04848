#pragma once

#include <memory>
#include <string>
#include <vector>

struct llama_model;
struct common_chat_templates;

namespace brisk {

struct ChatMessage {
  std::string role;
  std::string content;
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
  // `requested`: a built-in name, or empty for the GGUF's own. Null, with `error`, when the
  // chosen template cannot render even one user message.
  static std::unique_ptr<ChatTemplate> choose(const llama_model* model,
                                              const std::string& requested, std::string* error);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  bool apply(const std::vector<ChatMessage>& messages, std::string* prompt,
             std::string* error) const;
  // Where the template came from, for the startup log.
  const std::string& origin() const { return origin_; }
  bool is_jinja() const { return jinja_ != nullptr; }

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
