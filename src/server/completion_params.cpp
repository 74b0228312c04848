#include "server/completion_params.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "server/field_reader.h"

namespace brisk {
namespace {

using nlohmann::json;

// Most stop strings any peer accepts; a longer list is almost certainly a client bug.
constexpr size_t kMaxStopStrings = 16;

std::optional<std::string> message_content(const json& content, std::string* error) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      // Each field's type is checked before it is read: a wrong type is a 400, never a throw.
      const auto type = part.is_object() ? part.find("type") : part.end();
      const bool is_text_part = part.is_object() && type != part.end() && type->is_string() &&
                                *type == "text" && part.contains("text") &&
                                part["text"].is_string();
      if (!is_text_part) {
        *error = "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported";
        return std::nullopt;
      }
      text += part["text"].get<std::string>();
    }
    return text;
  }
  *error = "message 'content' must be a string or an array of text parts";
  return std::nullopt;
}

void read_messages(FieldReader& reader, CompletionParams& params) {
  const json* messages = reader.find("messages");
  if (messages == nullptr) return reader.fail("'messages' is required", "messages");
  if (!messages->is_array() || messages->empty()) {
    return reader.fail("'messages' must be a non-empty array of {role, content} objects",
                       "messages");
  }
  for (const json& message : *messages) {
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return reader.fail("each message must be an object with a string 'role'", "messages");
    }
    ChatMessage read;
    read.role = message["role"].get<std::string>();
    if (read.role == "developer") read.role = "system";
    if (read.role != "system" && read.role != "user" && read.role != "assistant" &&
        read.role != "tool") {
      return reader.fail("message role must be one of system, developer, user, assistant, "
                         "tool; got '" + read.role + "'",
                         "messages");
    }
    if (message.contains("content") && !message["content"].is_null()) {
      std::string error;
      auto text = message_content(message["content"], &error);
      if (!text) return reader.fail(error, "messages");
      read.content = std::move(*text);
    }
    const auto calls = message.find("tool_calls");
    if (calls != message.end() && !calls->is_null()) {
      if (read.role != "assistant") {
        return reader.fail("only an assistant message has 'tool_calls'", "messages");
      }
      if (auto error = read_tool_calls(*calls, read)) {
        if (!reader.error) reader.error = *error;
        return;
      }
    }
    if (read.role == "tool") {
      const auto id = message.find("tool_call_id");
      if (id == message.end() || !id->is_string()) {
        return reader.fail("a tool message needs 'tool_call_id', the id of the call it answers",
                           "messages");
      }
      read.tool_call_id = id->get<std::string>();
      const auto name = message.find("name");
      if (name != message.end() && name->is_string()) read.name = name->get<std::string>();
    }
    params.messages.push_back(std::move(read));
  }
}

void read_tools(FieldReader& reader, CompletionParams& params) {
  auto tools = read_tool_request(reader.body);
  if (auto* error = std::get_if<ApiError>(&tools)) {
    if (!reader.error) reader.error = *error;
    return;
  }
  params.tools = std::move(std::get<std::optional<ToolRequest>>(tools));
}

// Token ids of one prompt, checked; nullopt (and the reader's error) when one is out of range.
std::optional<TokenList> read_token_ids(FieldReader& reader, const json& ids) {
  TokenList tokens;
  for (const json& token : ids) {
    const int64_t id = token.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      reader.fail(fmt::format("token ids in 'prompt' must be between 0 and {}, got {}",
                              std::numeric_limits<int32_t>::max(), token.dump()),
                  "prompt");
      return std::nullopt;
    }
    tokens.push_back(static_cast<Token>(id));
  }
  return tokens;
}

bool is_token_ids(const json& value) {
  return value.is_array() && !value.empty() &&
         std::all_of(value.begin(), value.end(),
                     [](const json& t) { return t.is_number_integer(); });
}

// OpenAI's four forms: a string, a list of strings, a list of token ids (one prompt), or a list
// of token-id lists; each prompt gets its own choices.
void read_prompt(FieldReader& reader, CompletionParams& params) {
  const json* prompt = reader.find("prompt");
  if (prompt == nullptr) return reader.fail("'prompt' is required", "prompt");
  constexpr const char* kForms =
      "'prompt' must be a string, a list of strings, a list of token ids, or a list of token-id "
      "lists";
  if (prompt->is_string()) {
    if (prompt->get<std::string>().empty()) {
      return reader.fail("'prompt' must not be empty", "prompt");
    }
    params.prompts.push_back({prompt->get<std::string>(), std::nullopt});
    return;
  }
  if (!prompt->is_array()) return reader.fail(kForms, "prompt");
  if (prompt->empty()) return reader.fail("'prompt' must not be an empty list", "prompt");
  if (is_token_ids(*prompt)) {
    auto tokens = read_token_ids(reader, *prompt);
    if (tokens) params.prompts.push_back({{}, std::move(tokens)});
    return;
  }
  const bool all_strings =
      std::all_of(prompt->begin(), prompt->end(), [](const json& p) { return p.is_string(); });
  const bool all_token_lists = std::all_of(prompt->begin(), prompt->end(), is_token_ids);
  if (!all_strings && !all_token_lists) {
    return reader.fail(
        std::string(kForms) + ", not a mix (a token list must be non-empty and hold only integers)",
        "prompt");
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const json& item = (*prompt)[i];
    if (all_strings) {
      if (item.get<std::string>().empty()) {
        return reader.fail(fmt::format("'prompt[{}]' must not be empty", i), "prompt");
      }
      params.prompts.push_back({item.get<std::string>(), std::nullopt});
    } else {
      auto tokens = read_token_ids(reader, item);
      if (!tokens) return;
      params.prompts.push_back({{}, std::move(tokens)});
    }
  }
}

// n choices per prompt, each its own sequence: bounded so one request cannot take every
// sequence of the server.
void read_choice_count(FieldReader& reader, CompletionParams& params) {
  if (reader.find("n") == nullptr) return;
  auto n = reader.integer("n");
  if (!n) return;
  if (*n < 1 || *n > kMaxChoices) {
    return reader.fail(fmt::format("'n' must be an integer from 1 to {}, got {}", kMaxChoices, *n),
                       "n");
  }
  params.n = static_cast<int>(*n);
  const size_t choices = params.prompts.size() * static_cast<size_t>(params.n);
  if (choices > kMaxPromptChoices) {
    reader.fail(fmt::format("{} prompts with 'n' {} ask for {} choices; one request may ask for "
                            "at most {}",
                            params.prompts.size(), params.n, choices, kMaxPromptChoices),
                "n");
  }
}

void read_stop(FieldReader& reader, CompletionParams& params) {
  const json* stop = reader.find("stop");
  if (stop == nullptr) return;
  if (stop->is_string()) {
    params.stop.push_back(stop->get<std::string>());
    return;
  }
  if (stop->is_array() && stop->size() <= kMaxStopStrings &&
      std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); })) {
    for (const json& s : *stop) params.stop.push_back(s.get<std::string>());
    return;
  }
  reader.fail("'stop' must be a string or a list of at most 16 strings", "stop");
}

// OpenAI's presence and frequency penalties; the repetition penalty by vLLM's name (over the
// whole prompt and answer) or llama-server's (over its last repeat_last_n tokens, 64 unless
// given), not both with different values.
void read_penalties(FieldReader& reader, PenaltyParams& penalties) {
  if (auto p = reader.number("presence_penalty", -2.0, 2.0)) penalties.presence = float(*p);
  if (auto f = reader.number("frequency_penalty", -2.0, 2.0)) penalties.frequency = float(*f);
  constexpr int kLlamaServerLastN = 64;
  std::optional<double> repetition;
  for (const char* name : {"repetition_penalty", "repeat_penalty"}) {
    const auto value = reader.number(name, 0.0, 10.0);
    if (!value) continue;
    if (*value <= 0.0) {
      return reader.fail(std::string("'") + name + "' must be greater than 0 (1 is off)", name);
    }
    if (repetition && *repetition != *value) {
      return reader.fail("'repetition_penalty' (vLLM's name) and 'repeat_penalty' "
                         "(llama-server's) ask for different penalties: send one",
                         name);
    }
    // llama-server's name alone brings its window.
    if (std::string_view(name) == "repeat_penalty" && !repetition) {
      penalties.repetition_last_n = kLlamaServerLastN;
    }
    repetition = value;
    penalties.repetition = float(*value);
  }
  if (auto last_n = reader.integer("repeat_last_n")) {
    if (*last_n < -1) {
      return reader.fail("'repeat_last_n' must be -1 (the whole prompt and answer), 0 (off) or "
                         "a count of tokens",
                         "repeat_last_n");
    }
    penalties.repetition_last_n = static_cast<int>(std::min<int64_t>(*last_n, 1 << 30));
  }
}

void read_sampling(FieldReader& reader, SamplingParams& sampling) {
  if (auto t = reader.number("temperature", 0.0, 2.0)) sampling.temperature = float(*t);
  if (auto p = reader.number("top_p", 0.0, 1.0)) {
    // Checked as the float the sampler gets: 1e-60 is above 0 but rounds to 0.0f.
    if (float(*p) <= 0.0f) return reader.fail("'top_p' must be greater than 0", "top_p");
    sampling.top_p = float(*p);
  }
  if (auto k = reader.integer("top_k")) {
    if (*k < -1) return reader.fail("'top_k' must be -1 or 0 (off) or a positive integer", "top_k");
    sampling.top_k = *k > 0 ? static_cast<int>(std::min<int64_t>(*k, 1 << 20)) : 0;
  }
  if (auto m = reader.number("min_p", 0.0, 1.0)) sampling.min_p = float(*m);
  if (auto p = reader.number("typical_p", 0.0, 1.0)) {
    if (float(*p) <= 0.0f) return reader.fail("'typical_p' must be greater than 0", "typical_p");
    sampling.typical_p = float(*p);
  }
  if (auto seed = reader.integer("seed")) sampling.seed = static_cast<uint32_t>(*seed);
  read_penalties(reader, sampling.penalties);
}

// Chat: "logprobs": true plus optional "top_logprobs": N. Completions: "logprobs": N.
void read_logprobs(FieldReader& reader, CompletionParams& params) {
  const std::string range = "between 0 and " + std::to_string(kMaxTopLogprobs);
  if (params.kind == CompletionKind::text) {
    // llama-server's name for the same count, which clients written for it send beside it.
    for (const char* name : {"logprobs", "n_probs"}) {
      if (reader.find(name) == nullptr) continue;
      auto count = reader.integer(name);
      if (!count) return;  // reader.integer failed: not an integer
      if (*count < 0 || *count > kMaxTopLogprobs) {
        return reader.fail(std::string("'") + name + "' must be an integer " + range, name);
      }
      if (params.top_logprobs >= 0 && params.top_logprobs != *count) {
        return reader.fail("'n_probs' and 'logprobs' ask for different counts", "n_probs");
      }
      params.top_logprobs = static_cast<int>(*count);
    }
    return;
  }
  const bool wanted = reader.boolean("logprobs").value_or(false);
  auto top = reader.integer("top_logprobs");
  if (top && (*top < 0 || *top > kMaxTopLogprobs)) {
    return reader.fail("'top_logprobs' must be an integer " + range, "top_logprobs");
  }
  if (top && !wanted) {
    return reader.fail("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  if (wanted) params.top_logprobs = top ? static_cast<int>(*top) : 0;
}

void read_limits(FieldReader& reader, CompletionParams& params) {
  const char* name = reader.find("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto max_tokens = reader.integer(name)) {
    if (*max_tokens <= 0) {
      return reader.fail(
          std::string("'") + name + "' must be at least 1, got " + std::to_string(*max_tokens),
          name);
    }
    params.max_tokens =
        static_cast<int>(std::min<int64_t>(*max_tokens, std::numeric_limits<int>::max()));
  }
}

// {"token id": bias}: OpenAI's form. Ids are checked against the vocabulary by the server.
void read_logit_bias(FieldReader& reader, SamplingParams& sampling) {
  const json* bias = reader.find("logit_bias");
  if (bias == nullptr) return;
  if (!bias->is_object() || bias->size() > kMaxLogitBias) {
    return reader.fail(fmt::format("'logit_bias' must be an object of at most {} token ids "
                                   "(as strings) to biases from -100 to 100",
                                   kMaxLogitBias),
                       "logit_bias");
  }
  for (const auto& [key, value] : bias->items()) {
    Token token = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (ec != std::errc() || end != key.data() + key.size() || token < 0) {
      return reader.fail("'logit_bias' keys must be token ids, got '" + key + "'", "logit_bias");
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      return reader.fail("'logit_bias' values must be numbers from -100 to 100, got " +
                             value.dump() + " for token " + key,
                         "logit_bias");
    }
    sampling.logit_bias.emplace_back(token, value.get<float>());
  }
}

// response_format (OpenAI's) and grammar (llama-server's): at most one constraint.
// The schema's text with its properties in the client's order (nlohmann::json sorts object keys;
// the grammar, and so the output, lists properties in the schema's order, as OpenAI does).
std::string schema_in_client_order(std::string_view body, const json& schema) {
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  const auto format = ordered.find("response_format");
  if (format == ordered.end() || !format->is_object()) return schema.dump();
  const auto spec = format->find("json_schema");
  if (spec == format->end() || !spec->is_object()) return schema.dump();
  const auto found = spec->find("schema");
  return found != spec->end() && found->is_object() ? found->dump() : schema.dump();
}

void read_output_format(FieldReader& reader, CompletionParams& params, std::string_view body) {
  if (const json* format = reader.find("response_format")) {
    const auto type = format->is_object() ? format->find("type") : format->end();
    if (!format->is_object() || type == format->end() || !type->is_string()) {
      return reader.fail("'response_format' must be an object with a string 'type'",
                         "response_format");
    }
    for (const auto& [key, value] : format->items()) {
      if (key != "type" && key != "json_schema") {
        return reader.fail("'response_format." + key + "' is not a field of response_format",
                           "response_format");
      }
    }
    if (*type == "json_object") {
      params.grammar = GrammarRequest{GrammarRequest::Kind::json_schema, R"({"type":"object"})"};
    } else if (*type == "json_schema") {
      const auto spec = format->find("json_schema");
      if (spec == format->end() || !spec->is_object()) {
        return reader.fail(
            "'response_format.json_schema' must be an object with 'name' and 'schema'",
            "response_format");
      }
      for (const auto& [key, value] : spec->items()) {
        if (key != "name" && key != "schema" && key != "strict" && key != "description") {
          return reader.fail("'response_format.json_schema." + key +
                                 "' is not a field of json_schema (name, description, schema, "
                                 "strict)",
                             "response_format");
        }
      }
      const auto name = spec->find("name");
      if (name == spec->end() || !name->is_string() || name->get<std::string>().empty()) {
        return reader.fail("'response_format.json_schema.name' must be a non-empty string",
                           "response_format");
      }
      const auto strict = spec->find("strict");
      if (strict != spec->end() && !strict->is_null() && !strict->is_boolean()) {
        return reader.fail("'response_format.json_schema.strict' must be true or false",
                           "response_format");
      }
      const auto schema = spec->find("schema");
      // No schema: any JSON object (OpenAI requires one; llama-server accepts its absence).
      std::string text = R"({"type":"object"})";
      if (schema != spec->end() && !schema->is_null()) {
        if (!schema->is_object()) {
          return reader.fail("'response_format.json_schema.schema' must be a JSON schema object",
                             "response_format");
        }
        if (!schema->empty()) text = schema_in_client_order(body, *schema);
      }
      // The output always follows the schema, so strict true and false behave alike.
      params.grammar = GrammarRequest{GrammarRequest::Kind::json_schema, std::move(text)};
    } else if (*type != "text") {
      return reader.fail("'response_format.type' must be text, json_object or json_schema, got '" +
                             type->get<std::string>() + "'",
                         "response_format");
    }
    if (params.grammar) params.grammar_field = "response_format";
  }
  if (const json* grammar = reader.find("grammar")) {
    if (!grammar->is_string() || grammar->get<std::string>().empty()) {
      return reader.fail("'grammar' must be a non-empty string of GBNF rules", "grammar");
    }
    if (params.grammar) {
      return reader.fail("send either 'response_format' (json_object, json_schema) or 'grammar', "
                         "not both",
                         "grammar");
    }
    params.grammar = GrammarRequest{GrammarRequest::Kind::gbnf, grammar->get<std::string>()};
    params.grammar_field = "grammar";
  }
}

void read_scheduling(FieldReader& reader, CompletionParams& params) {
  if (auto priority = reader.integer("priority")) {
    if (*priority < -kMaxPriority || *priority > kMaxPriority) {
      return reader.fail("'priority' must be between -1000000 and 1000000 (lower runs sooner)",
                         "priority");
    }
    params.priority = static_cast<int>(*priority);
  }
  if (auto deadline = reader.number("deadline_ms", 1, 86400000.0)) params.deadline_ms = *deadline;
  if (const json* user = reader.find("user")) {
    if (!user->is_string() || user->get<std::string>().size() > kMaxSessionIdBytes) {
      return reader.fail(fmt::format("'user' must be a string of at most {} bytes",
                                     kMaxSessionIdBytes),
                         "user");
    }
    params.session = user->get<std::string>();
  }
}

void read_streaming(FieldReader& reader, CompletionParams& params) {
  params.stream = reader.boolean("stream").value_or(false);
  if (const json* options = reader.find("stream_options")) {
    if (!options->is_object())
      return reader.fail("'stream_options' must be an object", "stream_options");
    auto it = options->find("include_usage");
    if (it != options->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return reader.fail("'stream_options.include_usage' must be true or false",
                           "stream_options");
      }
      params.include_usage = it->get<bool>();
    }
  }
}

}  // namespace

std::optional<ApiError> read_sampling_params(const json& object, SamplingParams& sampling) {
  FieldReader reader{object, std::nullopt};
  read_sampling(reader, sampling);
  return reader.error;
}

std::variant<CompletionParams, ApiError> parse_completion_params(
    std::string_view body, CompletionKind kind, const GenerationDefaults& defaults) {
  if (!is_valid_utf8(body)) return ApiError::invalid("the request body is not valid UTF-8");
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) return ApiError::invalid("the request body is not valid JSON");
  if (!parsed.is_object()) return ApiError::invalid("the request body must be a JSON object");

  if (auto error = check_request_fields(parsed, kind)) return *error;

  CompletionParams params;
  params.kind = kind;
  params.sampling = defaults.sampling;
  FieldReader reader{parsed, std::nullopt};
  if (const json* model = reader.find("model")) {
    if (!model->is_string())
      reader.fail("'model' must be a string", "model");
    else
      params.model = model->get<std::string>();
  }
  if (kind == CompletionKind::chat) {
    read_messages(reader, params);
    read_tools(reader, params);
  } else {
    read_prompt(reader, params);
  }
  read_choice_count(reader, params);
  read_limits(reader, params);
  read_sampling(reader, params.sampling);
  read_logit_bias(reader, params.sampling);
  read_logprobs(reader, params);
  read_stop(reader, params);
  read_streaming(reader, params);
  read_scheduling(reader, params);
  params.ignore_eos = reader.boolean("ignore_eos").value_or(false);
  if (kind == CompletionKind::text) {
    params.echo = reader.boolean("echo").value_or(false);
    if (params.echo && params.top_logprobs >= 0) {
      reader.fail("'echo' with 'logprobs' would need the prompt's log-probabilities, which brisk "
                  "serve does not compute; send one of them",
                  "echo");
    }
  }
  read_output_format(reader, params, body);
  if (!reader.error && params.grammar && params.ignore_eos) {
    reader.fail("'ignore_eos' cannot be combined with '" + params.grammar_field +
                    "': once the output is complete only the end of generation is allowed",
                "ignore_eos");
  }
  if (!reader.error && params.grammar && params.tools &&
      params.tools->tools.choice != ChatTools::Choice::none) {
    reader.fail("'" + params.grammar_field +
                    "' cannot be combined with tools the model may call: the output format's "
                    "grammar would forbid the calls (send tool_choice 'none', or no tools)",
                params.grammar_field.c_str());
  }
  if (reader.error) return *reader.error;
  return params;
}

}  // namespace brisk
