#include <fmt/format.h>

#include <cctype>

#include "server/completions_route.h"

// How a validated request becomes the engine's requests: its prompts (a chat's rendering, or
// each of a completions' prompt list) and, for each, its n choices.

namespace brisk {

std::variant<std::vector<CompletionsRoute::PreparedPrompt>, CompletionsRoute::Refusal>
CompletionsRoute::prepare_prompts(const CompletionParams& params) {
  std::vector<PreparedPrompt> prompts;
  const size_t count = params.kind == CompletionKind::chat ? 1 : params.prompts.size();
  for (size_t i = 0; i < count; ++i) {
    const TextPrompt* text = params.kind == CompletionKind::chat ? nullptr : &params.prompts[i];
    PreparedPrompt prompt;
    if (auto error = prepare_prompt(params, text, &prompt.tokens, &prompt.chat)) {
      return Refusal{*error, "invalid_request"};
    }
    if (auto error = check_lengths(params, prompt.tokens, &prompt.max_tokens)) {
      if (count > 1) error->message = fmt::format("prompt {}: {}", i, error->message);
      return Refusal{*error, "prompt_too_long"};
    }
    if (params.echo && text != nullptr) {
      if (text->tokens) {
        for (Token token : *text->tokens) prompt.echo += engine_.token_piece(token);
      } else {
        prompt.echo = text->text;
      }
    }
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

std::variant<CompletionsRoute::ChoiceRequest, ApiError> CompletionsRoute::make_choice_request(
    const CompletionParams& params, const PreparedPrompt& prompt, int choice,
    const std::shared_ptr<Request>& first) {
  ChoiceRequest out;
  auto request = std::make_shared<Request>();
  request->id = ++next_request_id_;
  request->prompt_tokens = prompt.tokens;
  request->shares_prompt_of = first;
  request->sampling = params.sampling;
  // Choice i draws with seed + i: the choices differ, and the whole response is reproducible.
  if (request->sampling.seed) *request->sampling.seed += static_cast<uint32_t>(choice);
  request->top_logprobs = params.top_logprobs;
  request->max_tokens = prompt.max_tokens;
  request->max_tokens_named =
      params.max_tokens.has_value() || options_.generation.max_tokens.has_value();
  request->stop = params.stop;
  const ChatPrompt& chat = prompt.chat;
  request->stop.insert(request->stop.end(), chat.stops.begin(), chat.stops.end());
  request->ignore_eos = params.ignore_eos;
  request->priority = params.priority.value_or(0);
  request->deadline_ms = params.deadline_ms;
  out.tool_parser = chat.parser;
  if (chat.parser && choice > 0) {
    // A parser follows one output: each later choice gets its own from the same rendering.
    ChatPrompt again;
    std::string error;
    if (!engine_.render_chat(params.messages, &params.tools->tools, &again, &error)) {
      return ApiError::invalid(error, "tools");
    }
    out.tool_parser = again.parser;
  }
  const GrammarRequest calls{GrammarRequest::Kind::gbnf, chat.grammar,
                             chat.grammar_trigger_patterns, chat.grammar_trigger_tokens};
  // With ignore_eos a finished call could only be followed by more ends of generation: under
  // `auto` the calls are then parsed, not constrained.
  const bool constrain_calls = !chat.grammar.empty() && !(calls.lazy() && params.ignore_eos);
  if (constrain_calls) {
    // tool_choice required (or a named function): the template's tool-call syntax, enforced
    // from the first token; auto: from the template's call marker on (a lazy grammar).
    if (params.ignore_eos) {
      return ApiError::invalid(
          "'ignore_eos' cannot be combined with a required tool call: once the call is complete "
          "only the end of generation is allowed",
          "ignore_eos");
    }
    std::string error;
    request->constraint = engine_.compile_grammar(calls, &error);
    if (!request->constraint ||
        (!calls.lazy() &&
         !prefill_constraint(*request->constraint, chat.generation_prompt, &error))) {
      return ApiError::invalid("the tools' call syntax did not compile into a grammar: " + error,
                               "tools");
    }
  } else if (params.tools && !params.tools->strict_tools.empty() &&
             params.tools->tools.choice == ChatTools::Choice::automatic) {
    return ApiError::invalid(
        fmt::format("tools[{}].function.strict: with tool_choice 'auto' {}, so strict arguments "
                    "cannot be promised; send tool_choice 'required' or name the function, or "
                    "drop 'strict'",
                    params.tools->strict_tools.front(),
                    params.ignore_eos ? "and ignore_eos the calls are parsed, not constrained"
                                      : "this template's tool calls have no marker to start a "
                                        "grammar at: they are parsed, not constrained"),
        "tools");
  }
  if (params.grammar) {
    // Compiled here, on an I/O thread: a bad schema is a 400 before the request is queued. Each
    // choice gets its own state of the (cached) compiled grammar.
    std::string error;
    request->constraint = engine_.compile_grammar(*params.grammar, &error);
    if (!request->constraint) return ApiError::invalid(std::move(error), params.grammar_field);
  }
  out.request = std::move(request);
  return out;
}

// A tool-call grammar starts at the template's generation prompt, which the prompt already ends
// with: the constraint takes its tokens first (as llama.cpp's sampler does), skipping a leading
// space some tokenizers add before a first special token.
bool CompletionsRoute::prefill_constraint(TokenConstraint& constraint,
                                      const std::string& generation_prompt, std::string* error) {
  const TokenList tokens = engine_.tokenize(generation_prompt, false);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece = engine_.token_piece(tokens[i]);
    if (i == 0 && !piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) &&
        !std::isspace(static_cast<unsigned char>(generation_prompt[0]))) {
      continue;
    }
    try {
      constraint.accept(tokens[i]);
    } catch (const std::exception& e) {
      *error = fmt::format("its grammar refuses the template's generation prompt '{}' ({})",
                           generation_prompt, e.what());
      return false;
    }
  }
  return true;
}

std::optional<ApiError> CompletionsRoute::prepare_prompt(const CompletionParams& params,
                                                     const TextPrompt* text, TokenList* tokens,
                                                     ChatPrompt* chat) {
  if (params.kind == CompletionKind::chat) {
    std::string error;
    const ChatTools* tools = params.tools ? &params.tools->tools : nullptr;
    if (!engine_.render_chat(params.messages, tools, chat, &error)) {
      return ApiError::invalid(error, tools != nullptr ? "tools" : "messages");
    }
    *tokens = engine_.tokenize(chat->prompt, true);
    return std::nullopt;
  }
  if (text->tokens) {
    for (Token token : *text->tokens) {
      if (token >= engine_.vocabulary_size()) {
        return ApiError::invalid(fmt::format("token id {} is outside the vocabulary (size {})",
                                             token, engine_.vocabulary_size()),
                                 "prompt");
      }
    }
    *tokens = *text->tokens;
    return std::nullopt;
  }
  *tokens = engine_.tokenize(text->text, true);
  if (tokens->empty()) return ApiError::invalid("'prompt' produced no tokens", "prompt");
  return std::nullopt;
}

// A request's length limit is min(--ctx-size, the model's training context): prompt and
// completion together must fit, since they share one KV sequence.
std::optional<ApiError> CompletionsRoute::check_lengths(const CompletionParams& params,
                                                    const TokenList& tokens, int* max_tokens) {
  const int limit = engine_.max_request_tokens();
  const int prompt_tokens = static_cast<int>(tokens.size());
  if (prompt_tokens >= limit) {
    return ApiError::invalid(
        fmt::format("the prompt has {} tokens, but this server accepts at most {} tokens per "
                    "request (prompt + completion); shorten the prompt or start the server "
                    "with a larger --ctx-size",
                    prompt_tokens, limit),
        params.kind == CompletionKind::chat ? "messages" : "prompt");
  }
  if (!params.max_tokens) {
    *max_tokens = std::min(options_.generation.max_tokens.value_or(limit), limit - prompt_tokens);
  } else if (static_cast<int64_t>(prompt_tokens) + *params.max_tokens > limit) {
    return ApiError::invalid(
        fmt::format("the prompt has {} tokens and max_tokens is {}, together more than the {} "
                    "tokens this server accepts per request; lower max_tokens to at most {}",
                    prompt_tokens, *params.max_tokens, limit, limit - prompt_tokens),
        "max_tokens");
  } else {
    *max_tokens = *params.max_tokens;
  }
  return std::nullopt;
}

}  // namespace brisk
