#include "engine/chat_template.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/chat_output.h"
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
                                                   const std::string& jinja_file,
                                                   std::string* error) {
  std::unique_ptr<ChatTemplate> chosen(new ChatTemplate());
  if (!jinja_file.empty()) {
    std::ifstream file(jinja_file, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    if (!file || text.str().empty()) {
      *error = "--chat-template-file " + jinja_file + " cannot be read (or is empty)";
      return nullptr;
    }
    chosen->builtin_ = text.str();
    chosen->origin_ = "--chat-template-file " + jinja_file + ", as Jinja";
#ifdef BRISK_HAVE_LLAMA_COMMON
    try {
      chosen->jinja_.reset(common_chat_templates_init(model, text.str()).release());
    } catch (const std::exception& e) {
      *error = "--chat-template-file " + jinja_file + " does not parse as Jinja: " + e.what();
      return nullptr;
    }
#else
    *error = "--chat-template-file needs brisk built with llama.cpp's common library";
    return nullptr;
#endif
  } else if (!requested.empty()) {
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
  ChatPrompt rendered;
  if (!render(messages, nullptr, &rendered, error)) return false;
  *prompt = std::move(rendered.prompt);
  return true;
}

bool ChatTemplate::renders_tools() const {
#ifdef BRISK_HAVE_LLAMA_COMMON
  if (jinja_) {
    const auto caps = common_chat_templates_get_caps(jinja_.get());
    const auto tools = caps.find("supports_tools");
    return tools != caps.end() && tools->second;
  }
#endif
  return false;
}

namespace {

// Two edits to llama.cpp's tool-call grammar, each on one rule it names, so that it says what the
// request asked for:
// - `required`: llama.cpp lets free text come first ("root ::= <generation prompt> space
//   until-N? tool-calls": any text up to the call marker), so a model not trained on tools can
//   write prose until max_tokens and never call. `required` means calls only, as OpenAI's models
//   answer: the optional free text is taken out of the root rule.
// - parallel_tool_calls false: for templates that wrap each call in its own markers llama.cpp
//   allows one or more calls whatever the flag ("tool-calls ::= (tool-call space)+"); the
//   repetition is taken out.
std::string tighten_tool_grammar(const std::string& grammar, bool required, bool parallel) {
  static const std::regex free_text(R"( until-[0-9]+\?)");
  static const std::regex repeated_calls(R"(^tool-calls ::= (\(.*\))\+$)");
  std::string edited;
  std::istringstream lines(grammar);
  for (std::string line; std::getline(lines, line);) {
    if (required && line.starts_with("root ::= ")) line = std::regex_replace(line, free_text, "");
    if (!parallel) line = std::regex_replace(line, repeated_calls, "tool-calls ::= $1");
    edited += line + "\n";
  }
  return edited;
}

bool uses_tools(const std::vector<ChatMessage>& messages, const ChatTools* tools) {
  if (tools != nullptr && !tools->tools.empty()) return true;
  for (const ChatMessage& message : messages) {
    if (message.role == "tool" || !message.tool_calls.empty()) return true;
  }
  return false;
}

#ifdef BRISK_HAVE_LLAMA_COMMON
// A lazy grammar's triggers as llama.cpp's sampler reads them: a word is matched anywhere, a
// full pattern must match the whole output so far, a token when it is generated.
void add_grammar_triggers(const std::vector<common_grammar_trigger>& triggers,
                          ChatPrompt* rendered) {
  for (const common_grammar_trigger& trigger : triggers) {
    switch (trigger.type) {
      case COMMON_GRAMMAR_TRIGGER_TYPE_WORD:
        rendered->grammar_trigger_patterns.push_back(regex_escape(trigger.value));
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:
        rendered->grammar_trigger_patterns.push_back(trigger.value);
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: {
        const std::string& pattern = trigger.value;
        rendered->grammar_trigger_patterns.push_back(
            pattern.empty() ? "^$"
                            : (pattern.front() == '^' ? "" : "^") + pattern +
                                  (pattern.back() == '$' ? "" : "$"));
        break;
      }
      case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:
        rendered->grammar_trigger_tokens.push_back(trigger.token);
        break;
    }
  }
}
#endif

}  // namespace

bool ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTools* tools,
                          ChatPrompt* rendered, std::string* error) const {
#ifdef BRISK_HAVE_LLAMA_COMMON
  if (jinja_) {
    common_chat_templates_inputs inputs;
    inputs.use_jinja = true;
    inputs.add_generation_prompt = true;
    for (const ChatMessage& message : messages) {
      common_chat_msg msg;
      msg.role = message.role;
      msg.content = message.content;
      for (const ToolCall& call : message.tool_calls) {
        msg.tool_calls.push_back({call.name, call.arguments, call.id});
      }
      msg.tool_call_id = message.tool_call_id;
      msg.tool_name = message.name;
      inputs.messages.push_back(std::move(msg));
    }
    const bool calls_possible = tools != nullptr && !tools->tools.empty() &&
                                tools->choice != ChatTools::Choice::none;
    if (tools != nullptr && !tools->tools.empty() && !renders_tools()) {
      // Rendered anyway, the tools would vanish from the prompt: the model would never see them.
      *error = "the chat template (" + origin_ +
               ") does not render tools, so the model would never see them; start the server "
               "with --chat-template-file and a template that does (llama.cpp's "
               "models/templates/ has many)";
      return false;
    }
    if (tools != nullptr) {
      for (const ToolDefinition& tool : tools->tools) {
        inputs.tools.push_back({tool.name, tool.description, tool.parameters});
      }
      inputs.tool_choice = tools->choice == ChatTools::Choice::required ? COMMON_CHAT_TOOL_CHOICE_REQUIRED
                           : tools->choice == ChatTools::Choice::none   ? COMMON_CHAT_TOOL_CHOICE_NONE
                                                                        : COMMON_CHAT_TOOL_CHOICE_AUTO;
      inputs.parallel_tool_calls = tools->parallel_calls;
    }
    try {
      common_chat_params params = common_chat_templates_apply(jinja_.get(), inputs);
      rendered->prompt = std::move(params.prompt);
      if (calls_possible) {
        spdlog::debug("tools: format {}, grammar {} bytes{}, {} stops, parser {} bytes",
                      common_chat_format_name(params.format), params.grammar.size(),
                      params.grammar_lazy ? " (lazy)" : "", params.additional_stops.size(),
                      params.parser.size());
        spdlog::trace("tools grammar:\n{}", params.grammar);
        if (!params.grammar_lazy) {
          rendered->grammar =
              tighten_tool_grammar(params.grammar, tools->choice == ChatTools::Choice::required,
                                   tools->parallel_calls);
        } else if (!params.grammar.empty() && !params.grammar_triggers.empty()) {
          // `auto`: the model writes freely until it opens a call; the call is then constrained.
          rendered->grammar = tighten_tool_grammar(params.grammar, false, tools->parallel_calls);
          add_grammar_triggers(params.grammar_triggers, rendered);
        }
        rendered->generation_prompt = params.generation_prompt;
        rendered->stops = std::move(params.additional_stops);
        rendered->parser.reset(new ChatOutputParser(static_cast<int>(params.format),
                                                    std::move(params.generation_prompt),
                                                    params.parser, tools->parallel_calls));
      }
      return true;
    } catch (const std::exception& e) {
      // The template's own raise_exception (roles that must alternate, say) lands here.
      *error = std::string("the chat template cannot render these messages: ") + e.what();
      return false;
    }
  }
#endif
  if (uses_tools(messages, tools)) {
    *error = "tools, tool calls and tool messages need the model's own Jinja chat template; this "
             "server renders chats with " + origin_;
    return false;
  }
  return apply_builtin(messages, &rendered->prompt, error);
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
