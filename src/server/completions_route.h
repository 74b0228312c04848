#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "sched/engine_loop.h"
#include "server/api_error.h"
#include "server/completion_params.h"
#include "server/http_session.h"
#include "server/rejection_counts.h"
#include "server/trace_writer.h"

namespace brisk {

// What a generative model's completion routes answer with beside its engine.
struct CompletionsRouteOptions {
  std::string model_name;
  // Every completion's system_fingerprint (OpenAI's field): "fp_" and a hash of what its numbers
  // depend on (Engine::numerics_identity, the prefix cache); docs/api.md, reproducible seeds.
  std::string system_fingerprint;
  GenerationDefaults generation;  // what requests that name no sampling parameter get
};

// /v1/chat/completions and /v1/completions of one generative model: validates a request, turns
// it into the engine loop's Requests (its prompts, each with its n choices) on the I/O thread,
// and hands them to a CompletionExchange that answers as they generate.
class CompletionsRoute {
 public:
  CompletionsRoute(Engine& engine, EngineLoop& engine_loop, RejectionCounts& rejections,
                   CompletionsRouteOptions options);

  // `keep_loaded`: the request's hold on its model (server/model_registry.h), kept until it is
  // answered; `model_load_ms`: how long it waited for the model to load (brisk_timings).
  void handle(const HttpRequest& request, CompletionKind kind,
              const std::shared_ptr<HttpSession>& session,
              std::shared_ptr<const void> keep_loaded = nullptr, double model_load_ms = 0);
  // --trace-out: every finished request is recorded there (null: none). Set before serving.
  void set_trace_writer(TraceWriter* trace) { trace_ = trace; }

 private:
  // One prompt of a request (a chat's, or each of a completions' prompt list), ready for its
  // choices (server/completion_requests.cpp).
  struct PreparedPrompt {
    TokenList tokens;
    ChatPrompt chat;  // chat: the rendering, with its tools' grammar, stops and parser
    int max_tokens = 0;
    std::string echo;  // completions with echo: the prompt's text
  };
  struct ChoiceRequest {
    std::shared_ptr<Request> request;
    std::shared_ptr<ChatOutputParser> tool_parser;  // chat with tools: this choice's own
  };
  // A 400 and the rejection reason /metrics counts it under.
  struct Refusal {
    ApiError error;
    std::string reason;
  };
  std::variant<std::vector<PreparedPrompt>, Refusal> prepare_prompts(
      const CompletionParams& params);
  // The prompt's tokens; a chat's rendering also brings its tools' grammar, stops and parser.
  std::optional<ApiError> prepare_prompt(const CompletionParams& params, const TextPrompt* text,
                                         TokenList* tokens, ChatPrompt* chat);
  // Choice `choice` (0 to n - 1) of `prompt`: its own sampler seed, output constraint and
  // tool-call parser; a later choice shares the first one's prompt cells (`first`).
  std::variant<ChoiceRequest, ApiError> make_choice_request(const CompletionParams& params,
                                                            const PreparedPrompt& prompt,
                                                            int choice,
                                                            const std::shared_ptr<Request>& first);
  bool prefill_constraint(TokenConstraint& constraint, const std::string& generation_prompt,
                          std::string* error);
  std::optional<ApiError> check_lengths(const CompletionParams& params, const TokenList& tokens,
                                        int* max_tokens);
  static std::optional<ApiError> read_session_header(const HttpRequest& http_request,
                                                     CompletionParams& params);
  static std::optional<ApiError> read_priority_header(const HttpRequest& http_request,
                                                      CompletionParams& params);
  // The prompt's text for --trace-text; empty without it.
  std::string trace_prompt_text(const TokenList& tokens) const;
  // The engine loop refused the request: 429 with Retry-After, or 503 while shutting down.
  HttpResponse refusal_response(SubmitStatus status, double estimated_wait_ms);
  HttpResponse reject(const ApiError& error, const std::string& reason);

  Engine& engine_;
  EngineLoop& engine_loop_;
  RejectionCounts& rejections_;
  const CompletionsRouteOptions options_;
  TraceWriter* trace_ = nullptr;
  std::atomic<uint64_t> next_request_id_{0};
};

}  // namespace brisk
