#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "sched/engine_loop.h"
#include "sched/serving_metrics.h"
#include "server/api_error.h"
#include "server/completion_params.h"
#include "server/connection_limiter.h"
#include "server/embeddings_route.h"
#include "server/http_session.h"
#include "server/trace_writer.h"

namespace brisk {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // empty: no authentication
  // Routes served without the key when one is set (probes and Prometheus need none).
  std::vector<std::string> public_routes = {"/health", "/ready", "/metrics"};
  int max_connections = 1024;
  std::string model_name;
  // Every completion's system_fingerprint (OpenAI's field): "fp_" and a hash of what its numbers
  // depend on (Engine::numerics_identity, the prefix cache); docs/api.md, reproducible seeds.
  std::string system_fingerprint;
  HttpLimits limits;
  int io_threads = 2;
  std::chrono::seconds drain_timeout{10};
  GenerationDefaults generation;
  bool vllm_metrics = false;  // --metrics-compat vllm: the gauges under vLLM's names too  // what
                              // requests that name no sampling parameter get
};

// OpenAI's system_fingerprint for a server whose numbers depend on `numerics` (what it runs and
// how, in words): "fp_" and 10 hex digits of its SHA-256, so the same configuration always
// answers the same fingerprint and any change of it another.
std::string system_fingerprint_for(const std::string& numerics);

// The OpenAI-compatible HTTP front: routes, authentication, validation and admission.
// Generation itself is the engine loop's; this class only turns HTTP into Requests and back.
class OpenAiServer {
 public:
  // A generative model on the completion routes.
  OpenAiServer(Engine& engine, EngineLoop& engine_loop, ServingMetrics& metrics,
               ServerOptions options);
  // An embedding model on /v1/embeddings.
  OpenAiServer(EmbeddingsRoute& embeddings, ServingMetrics& metrics, ServerOptions options);

  bool listen(std::string* error);
  int port() const { return bound_port_; }
  // Serves until SIGINT/SIGTERM, then drains in-flight work (up to --drain-timeout) and returns.
  // A second signal during the drain exits at once. With a trace writer, SIGHUP reopens its file.
  void run_until_signal();
  // --trace-out: every finished request is recorded there (null: none). Set before serving.
  void set_trace_writer(TraceWriter* trace) { trace_ = trace; }

 private:
  void accept_next();
  void accept_after_pause();
  void on_accepted(tcp::socket&& socket);
  void run_io();
  void drain();
  bool is_public(std::string_view path) const;
  std::optional<HttpResponse> check_header(const http::request_parser<http::string_body>& parser);
  void handle(HttpRequest&& request, const std::shared_ptr<HttpSession>& session);
  void handle_completion(const HttpRequest& request, CompletionKind kind,
                         const std::shared_ptr<HttpSession>& session);
  static std::optional<ApiError> read_session_header(const HttpRequest& http_request,
                                                     CompletionParams& params);
  // The prompt's text for --trace-text; empty without it.
  std::string trace_prompt_text(const TokenList& tokens) const;
  static std::optional<ApiError> read_priority_header(const HttpRequest& http_request,
                                                      CompletionParams& params);
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
  HttpResponse handle_tokenize(const HttpRequest& request);
  HttpResponse models_response() const;
  HttpResponse reject(const ApiError& error, const std::string& reason);
  std::optional<ApiError> check_model_kind(std::string_view path) const;

  // One model per server for now: a generative one (engine and loop) or an embedding one.
  Engine* engine_ = nullptr;
  EngineLoop* engine_loop_ = nullptr;
  EmbeddingsRoute* embeddings_ = nullptr;
  ServingMetrics& metrics_;
  ServerOptions options_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_pause_;
  ConnectionLimiter connections_;
  TraceWriter* trace_ = nullptr;
  int bound_port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_id_{0};
};

}  // namespace brisk
