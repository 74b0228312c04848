#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/connection_limiter.h"
#include "server/http_session.h"
#include "server/model_registry.h"
#include "server/rejection_counts.h"
#include "server/trace_writer.h"

namespace brisk {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // empty: no authentication
  // Routes served without the key when one is set (probes and Prometheus need none).
  std::vector<std::string> public_routes = {"/health", "/ready", "/metrics"};
  int max_connections = 1024;
  HttpLimits limits;
  int io_threads = 2;
  std::chrono::seconds drain_timeout{10};
  bool vllm_metrics = false;  // --metrics-compat vllm: the gauges under vLLM's names too
};

// OpenAI's system_fingerprint for a server whose numbers depend on `numerics` (what it runs and
// how, in words): "fp_" and 10 hex digits of its SHA-256, so the same configuration always
// answers the same fingerprint and any change of it another.
std::string system_fingerprint_for(const std::string& numerics);

// The OpenAI-compatible HTTP front: routes, authentication, and which model a request is for.
// Each model's routes (server/completions_route.h, server/embeddings_route.h) turn its requests
// into work for its engine loop or batcher and answer them.
class OpenAiServer {
 public:
  OpenAiServer(ModelRegistry& models, RejectionCounts& rejections, ServerOptions options);

  bool listen(std::string* error);
  int port() const { return bound_port_; }
  // Serves until SIGINT/SIGTERM, then drains in-flight work (up to --drain-timeout) and returns.
  // A second signal during the drain exits at once. With a trace writer, SIGHUP reopens its file.
  void run_until_signal();
  // --trace-out: every finished request is recorded there (null: none). Set before serving.
  void set_trace_writer(TraceWriter* trace);

 private:
  void accept_next();
  void accept_after_pause();
  void on_accepted(tcp::socket&& socket);
  void run_io();
  void drain();
  bool is_public(std::string_view path) const;
  std::optional<HttpResponse> check_header(const http::request_parser<http::string_body>& parser);
  void handle(HttpRequest&& request, const std::shared_ptr<HttpSession>& session);
  // The model a request's body names (the default one when it names none), or a 404 that lists
  // the served ones; a 400 when that model serves no such route.
  std::variant<ServedModel*, HttpResponse> model_for(const HttpRequest& request,
                                                     std::string_view path);
  void handle_tokenize(HttpRequest&& request, const std::shared_ptr<HttpSession>& session);
  void handle_residency(HttpRequest&& request, const std::shared_ptr<HttpSession>& session,
                        bool load);
  HttpResponse residency_refusal(const ApiError& error);
  HttpResponse handle_scheduler(const HttpRequest& request);
  HttpResponse ready_response() const;
  HttpResponse metrics_response() const;
  HttpResponse models_response() const;
  HttpResponse reject(const ApiError& error, const std::string& reason);
  HttpResponse reject_unknown_model(const std::string& name);

  ModelRegistry& models_;
  RejectionCounts& rejections_;
  ServerOptions options_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_pause_;
  ConnectionLimiter connections_;
  TraceWriter* trace_ = nullptr;
  int bound_port_ = 0;
  std::atomic<bool> draining_{false};
};

}  // namespace brisk
