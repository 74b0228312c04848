#include "engine/chat_template.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "llama.h"

#ifdef BRISK_HAVE_LLAMA_COMMON
// llama.cpp's Jinja headers define static helpers this file does not call.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "chat.h"
#pragma GCC diagnostic pop
#endif

namespace brisk {
namespace {

std::string metadata(const llama_model* model, const char* key) {
  char buffer[256];
  const int32_t length = llama_model_meta_val_str(model, key, buffer, sizeof(buffer));
  return length > 0 ? std::string(buffer, std::min<size_t>(length, sizeof(buffer) - 1)) : "";
}

}  // namespace

void ChatTemplate::JinjaDeleter::operator()(common_chat_templates* templates) const {
#ifdef BRISK_HAVE_LLAMA_COMMON
  common_chat_templates_free(templates);
#else
  (void)templates;
#endif
}

ChatTemplate::~ChatTemplate() = default;

std::unique_ptr<ChatTemplate> ChatTemplate::choose(const llama_model* model,
                                                   const std::string& requested,
                                                   std::string* error) {
  std::unique_ptr<ChatTemplate> chosen(new ChatTemplate());
  if (!requested.empty()) {
    chosen->builtin_ = requested;
    chosen->origin_ = "--chat-template " + requested;
  } else if (const char* embedded = llama_model_chat_template(model, nullptr)) {
    chosen->builtin_ = embedded;
    chosen->origin_ = "the model's GGUF metadata";
#ifdef BRISK_HAVE_LLAMA_COMMON
    try {
      chosen->jinja_.reset(common_chat_templates_init(model, "").release());
      chosen->origin_ += ", as Jinja";
    } catch (const std::exception& e) {
      spdlog::warn(
          "the GGUF's chat template does not parse as Jinja ({}); trying llama.cpp's built-in "
          "template families on it",
          e.what());
    }
#endif
  } else {
    const std::string architecture = metadata(model, "general.architecture");
    chosen->builtin_ = architecture.starts_with("gemma") ? "gemma" : "chatml";
    chosen->origin_ = "built-in '" + chosen->builtin_ +
                      "' (the GGUF has no template; architecture " + architecture + ")";
  }
  std::string probe;
  if (!chosen->apply({{"user", "hi"}}, &probe, error)) {
    *error = "chat template from " + chosen->origin_ + " cannot be used (" + *error +
             "); pass --chat-template with a built-in name (e.g. gemma, chatml, llama3)";
    return nullptr;
  }
  return chosen;
}

bool ChatTemplate::apply(const std::vector<ChatMessage>& messages, std::string* prompt,
                         std::string* error) const {
#ifdef BRISK_HAVE_LLAMA_COMMON
  if (jinja_) {
    common_chat_templates_inputs inputs;
    inputs.use_jinja = true;
    inputs.add_generation_prompt = true;
    for (const ChatMessage& message : messages) {
      common_chat_msg rendered;
      rendered.role = message.role;
      rendered.content = message.content;
      inputs.messages.push_back(std::move(rendered));
    }
    try {
      *prompt = common_chat_templates_apply(jinja_.get(), inputs).prompt;
      return true;
    } catch (const std::exception& e) {
      // The template's own raise_exception (roles that must alternate, say) lands here.
      *error = std::string("the chat template cannot render these messages: ") + e.what();
      return false;
    }
  }
#endif
  return apply_builtin(messages, prompt, error);
}

bool ChatTemplate::apply_builtin(const std::vector<ChatMessage>& messages, std::string* prompt,
                                 std::string* error) const {
  std::vector<llama_chat_message> chat;
  size_t total_chars = 0;
  for (const ChatMessage& message : messages) {
    chat.push_back({message.role.c_str(), message.content.c_str()});
    total_chars += message.role.size() + message.content.size();
  }
  std::string buffer(2 * total_chars + 256, '\0');
  int32_t length = llama_chat_apply_template(builtin_.c_str(), chat.data(), chat.size(), true,
                                             buffer.data(), static_cast<int32_t>(buffer.size()));
  if (length > static_cast<int32_t>(buffer.size())) {
    buffer.resize(static_cast<size_t>(length));
    length = llama_chat_apply_template(builtin_.c_str(), chat.data(), chat.size(), true,
                                       buffer.data(), static_cast<int32_t>(buffer.size()));
  }
  if (length < 0) {
    *error = "the chat template could not render these messages";
    return false;
  }
  buffer.resize(static_cast<size_t>(length));
  *prompt = std::move(buffer);
  return true;
}

}  // namespace brisk
