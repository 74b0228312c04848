#include "server/openai_server.h"

#include <cctype>
#include <charconv>

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/sha256.h"
#include "server/completion_exchange.h"
#include "server/openai_json.h"
#include "server/scheduler_json.h"

namespace brisk {
namespace {

// Output formats (response_format, grammar) converted and parsed, and those found compiled.
std::string render_grammar_metrics(const GrammarCompiler& grammars) {
  return fmt::format(
      "# HELP brisk_grammar_compilations_total Output formats (JSON schemas, GBNF) compiled into "
      "grammars, the ones refused included.\n"
      "# TYPE brisk_grammar_compilations_total counter\n"
      "brisk_grammar_compilations_total {}\n"
      "# HELP brisk_grammar_cache_hits_total Requests whose output format was already compiled.\n"
      "# TYPE brisk_grammar_cache_hits_total counter\n"
      "brisk_grammar_cache_hits_total {}\n",
      grammars.misses(), grammars.hits());
}

using nlohmann::json;

HttpResponse json_response(http::status status, const json& body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = dump_json(body);
  return response;
}

std::string_view path_of(boost::beast::string_view target) {
  const std::string_view view(target.data(), target.size());
  return view.substr(0, view.find('?'));
}

std::string_view as_std(boost::beast::string_view view) { return {view.data(), view.size()}; }

// Constant-time comparison: the time to reject a key must not reveal how much of it matched.
bool keys_equal(std::string_view a, std::string_view b) {
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return difference == 0 && !b.empty();
}

struct Route {
  std::string_view path;
  http::verb method;
};

constexpr Route kRoutes[] = {
    {"/health", http::verb::get},          {"/ready", http::verb::get},
    {"/metrics", http::verb::get},         {"/debug/scheduler", http::verb::get},
    {"/v1/models", http::verb::get},       {"/v1/chat/completions", http::verb::post},
    {"/v1/completions", http::verb::post}, {"/tokenize", http::verb::post},
    {"/v1/embeddings", http::verb::post},
};

// The routes only a generative model serves (the completion engine's).
bool is_generation_route(std::string_view path) {
  return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/debug/scheduler";
}

}  // namespace

OpenAiServer::OpenAiServer(Engine& engine, EngineLoop& engine_loop, ServingMetrics& metrics,
                           ServerOptions options)
    : engine_(&engine),
      engine_loop_(&engine_loop),
      metrics_(metrics),
      options_(std::move(options)),
      acceptor_(io_),
      accept_pause_(io_),
      connections_(options_.max_connections) {}

OpenAiServer::OpenAiServer(EmbeddingsRoute& embeddings, ServingMetrics& metrics,
                           ServerOptions options)
    : embeddings_(&embeddings),
      metrics_(metrics),
      options_(std::move(options)),
      acceptor_(io_),
      accept_pause_(io_),
      connections_(options_.max_connections) {}

bool OpenAiServer::listen(std::string* error) {
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  if (ec) {
    *error = "--host '" + options_.host + "' is not an IP address";
    return false;
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    *error = fmt::format("cannot listen on {}:{}: {} (is another server using the port?)",
                         options_.host, options_.port, ec.message());
    return false;
  }
  bound_port_ = acceptor_.local_endpoint().port();
  return true;
}

void OpenAiServer::run_until_signal() {
  net::signal_set signals(io_, SIGINT, SIGTERM);
  std::thread drain_thread;
  std::function<void(beast::error_code, int)> on_signal = [&](beast::error_code ec,
                                                              int signal_number) {
    if (ec) return;
    if (draining_.exchange(true)) {
      spdlog::warn("received signal {} again: exiting now without finishing the drain",
                   signal_number);
      std::_Exit(128 + signal_number);
    }
    spdlog::info("received signal {}: draining for up to {}s (send it again to exit now)",
                 signal_number, options_.drain_timeout.count());
    connections_.begin_closing();
    beast::error_code ignored;
    acceptor_.close(ignored);
    signals.async_wait(on_signal);
    // The drain blocks, so it runs beside the I/O threads that must keep writing responses.
    drain_thread = std::thread([this] { drain(); });
  };
  signals.async_wait(on_signal);
  // SIGHUP keeps its default (the end of the process) unless there is a trace file to reopen.
  std::optional<net::signal_set> hangups;
  std::function<void(beast::error_code, int)> on_hangup = [&](beast::error_code ec, int) {
    if (ec) return;
    trace_->reopen();
    hangups->async_wait(on_hangup);
  };
  if (trace_) {
    hangups.emplace(io_, SIGHUP);
    hangups->async_wait(on_hangup);
  }
  accept_next();
  std::vector<std::thread> threads;
  for (int i = 1; i < options_.io_threads; ++i) threads.emplace_back([this] { run_io(); });
  run_io();
  for (auto& thread : threads) thread.join();
  if (drain_thread.joinable()) drain_thread.join();
  spdlog::info("server stopped");
}

// An exception that escapes a handler ends that handler, never the I/O thread or the process.
void OpenAiServer::run_io() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("an I/O handler failed: {}", e.what());
    }
  }
}

void OpenAiServer::drain() {
  if (engine_loop_) engine_loop_->shutdown(options_.drain_timeout);
  if (embeddings_) embeddings_->shutdown(options_.drain_timeout);
  // Every request has its final update; let the responses reach their clients.
  const TimePoint deadline = Clock::now() + std::chrono::seconds(2);
  while (connections_.busy() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (connections_.busy() > 0) {
    spdlog::warn("{} responses were still being written when the drain ended", connections_.busy());
  }
  io_.stop();
}

void OpenAiServer::accept_next() {
  acceptor_.async_accept(net::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors (or a transient error): retrying at once would spin a core.
      spdlog::warn("accepting a connection failed: {}; pausing accepts for 50 ms", ec.message());
      return accept_after_pause();
    }
    on_accepted(std::move(socket));
    accept_next();
  });
}

void OpenAiServer::accept_after_pause() {
  accept_pause_.expires_after(std::chrono::milliseconds(50));
  accept_pause_.async_wait([this](beast::error_code ec) {
    if (!ec && acceptor_.is_open()) accept_next();
  });
}

void OpenAiServer::on_accepted(tcp::socket&& socket) {
  auto slot = connections_.try_acquire();
  const bool refused = slot == nullptr;
  auto session = std::make_shared<HttpSession>(
      std::move(socket), options_.limits,
      [this](const auto& parser) { return check_header(parser); },
      [this](HttpRequest&& request, const std::shared_ptr<HttpSession>& session) {
        handle(std::move(request), session);
      },
      std::move(slot));
  if (!refused) return session->start();
  ApiError error;
  error.status = 503;
  error.type = "server_error";
  error.code = "too_many_connections";
  error.message = fmt::format(
      "the server has {} open connections, its limit (--max-connections); retry shortly or "
      "reuse a keep-alive connection",
      options_.max_connections);
  metrics_.count_rejection("too_many_connections");
  HttpResponse response = error_response(error);
  response.set(http::field::retry_after, "1");
  session->refuse(std::move(response));
}

bool OpenAiServer::is_public(std::string_view path) const {
  for (const std::string& route : options_.public_routes) {
    if (route == path) return true;
  }
  return false;
}

std::optional<HttpResponse> OpenAiServer::check_header(
    const http::request_parser<http::string_body>& parser) {
  const auto& request = parser.get();
  const std::string_view path = path_of(request.target());
  if (options_.api_key.empty() || is_public(path)) return std::nullopt;
  const std::string_view authorization = as_std(request[http::field::authorization]);
  const std::string_view prefix = "Bearer ";
  if (authorization.starts_with(prefix) &&
      keys_equal(authorization.substr(prefix.size()), options_.api_key)) {
    return std::nullopt;
  }
  ApiError error;
  error.status = 401;
  error.type = "authentication_error";
  error.code = "invalid_api_key";
  error.message = authorization.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                        : "invalid API key";
  metrics_.count_rejection("unauthorized");
  return error_response(error);
}

void OpenAiServer::handle(HttpRequest&& request, const std::shared_ptr<HttpSession>& session) {
  const std::string_view path = path_of(request.target());
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& candidate : kRoutes) {
    if (candidate.path != path) continue;
    path_known = true;
    if (candidate.method == request.method()) route = &candidate;
  }
  if (route == nullptr) {
    ApiError error;
    error.status = path_known ? 405 : 404;
    error.type = path_known ? "invalid_request_error" : "not_found_error";
    error.message =
        path_known ? fmt::format("method {} is not allowed on {}",
                                 std::string(request.method_string()), path)
                   : fmt::format("no route for {} {}", std::string(request.method_string()), path);
    HttpResponse response = error_response(error);
    if (path_known) {
      for (const Route& candidate : kRoutes) {
        if (candidate.path == path)
          response.set(http::field::allow, http::to_string(candidate.method));
      }
    }
    return session->respond(std::move(response));
  }

  if (auto error = check_model_kind(path))
    return session->respond(reject(*error, "wrong_model_kind"));
  if (path == "/health")
    return session->respond(json_response(http::status::ok, {{"status", "ok"}}));
  if (path == "/ready") {
    if (draining_) {
      return session->respond(
          json_response(http::status::service_unavailable, {{"status", "draining"}}));
    }
    // A full queue answers 429 to every new request: a balancer should send them elsewhere.
    if (engine_loop_ ? engine_loop_->stats().queue_full() : embeddings_->queue_full()) {
      return session->respond(
          json_response(http::status::service_unavailable, {{"status", "queue_full"}}));
    }
    return session->respond(json_response(http::status::ok, {{"status", "ready"}}));
  }
  if (path == "/metrics") {
    HttpResponse response{http::status::ok, 11};
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    const SchedulerStats stats = engine_loop_ ? engine_loop_->stats() : SchedulerStats{};
    response.body() = metrics_.render_prometheus(stats) + connections_.render_prometheus();
    response.body() +=
        engine_ ? render_grammar_metrics(engine_->grammars()) : embeddings_->render_metrics();
    if (trace_) response.body() += trace_->render_prometheus();
    if (options_.vllm_metrics) {
      response.body() += ServingMetrics::render_vllm_compat(stats, options_.model_name);
    }
    return session->respond(std::move(response));
  }
  if (path == "/debug/scheduler") {
    return session->respond(
        json_response(http::status::ok, scheduler_json(engine_loop_->snapshot())));
  }
  if (path == "/v1/models") return session->respond(models_response());
  if (path == "/tokenize") return session->respond(handle_tokenize(request));
  if (path == "/v1/embeddings") return embeddings_->handle(request, session);
  handle_completion(request,
                    path == "/v1/chat/completions" ? CompletionKind::chat : CompletionKind::text,
                    session);
}

void OpenAiServer::handle_completion(const HttpRequest& http_request, CompletionKind kind,
                                     const std::shared_ptr<HttpSession>& session) {
  const TimePoint arrival = Clock::now();
  auto parsed = parse_completion_params(http_request.body(), kind, options_.generation);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    return session->respond(reject(*error, "invalid_request"));
  }
  CompletionParams params = std::move(std::get<CompletionParams>(parsed));
  if (params.model && *params.model != options_.model_name) {
    ApiError error;
    error.status = 404;
    error.type = "not_found_error";
    error.code = "model_not_found";
    error.param = "model";
    error.message = fmt::format("the model '{}' does not exist here; this server serves '{}'",
                                *params.model, options_.model_name);
    return session->respond(reject(error, "unknown_model"));
  }
  auto prepared = prepare_prompts(params);
  if (auto* refusal = std::get_if<Refusal>(&prepared)) {
    return session->respond(reject(refusal->error, refusal->reason));
  }
  const auto& prompts = std::get<std::vector<PreparedPrompt>>(prepared);
  for (const auto& [token, bias] : params.sampling.logit_bias) {
    if (token >= engine_->vocabulary_size()) {
      return session->respond(reject(
          ApiError::invalid(fmt::format("'logit_bias' names token {}, but the vocabulary has {} "
                                        "tokens",
                                        token, engine_->vocabulary_size()),
                            "logit_bias"),
          "invalid_request"));
    }
  }
  if (auto error = read_priority_header(http_request, params))
    return session->respond(reject(*error, "invalid_request"));
  if (auto error = read_session_header(http_request, params))
    return session->respond(reject(*error, "invalid_request"));
  // Choice index = prompt index * n + i, as OpenAI and vLLM number them.
  std::vector<ChoiceRequest> choices;
  std::vector<std::string> echoes;
  for (const PreparedPrompt& prompt : prompts) {
    std::shared_ptr<Request> first;
    for (int i = 0; i < params.n; ++i) {
      auto made = make_choice_request(params, prompt, i, first);
      if (auto* error = std::get_if<ApiError>(&made)) {
        return session->respond(reject(*error, "invalid_request"));
      }
      ChoiceRequest& choice = std::get<ChoiceRequest>(made);
      choice.request->arrival = arrival;
      if (i == 0) first = choice.request;
      choices.push_back(std::move(choice));
      echoes.push_back(prompt.echo);
    }
  }
  auto exchange =
      std::make_shared<CompletionExchange>(session, std::move(params), options_.model_name,
                                           options_.system_fingerprint, *engine_loop_, *engine_);
  std::vector<std::shared_ptr<Request>> requests;
  std::vector<std::string> prompt_texts;
  for (size_t i = 0; i < choices.size(); ++i) {
    exchange->add_choice(choices[i].request, std::move(echoes[i]), choices[i].tool_parser);
    requests.push_back(choices[i].request);
    if (trace_) prompt_texts.push_back(trace_prompt_text(choices[i].request->prompt_tokens));
  }
  if (trace_) exchange->record_to(*trace_, std::move(prompt_texts));
  double estimated_wait_ms = 0;
  const SubmitStatus status = engine_loop_->submit_all(std::move(requests), &estimated_wait_ms);
  if (status == SubmitStatus::accepted) return exchange->begin();

  exchange->abandon();  // the exchange will never hear from these requests
  ApiError error;
  if (status != SubmitStatus::shutting_down) {
    error.status = 429;
    error.type = "rate_limit_exceeded";
    int retry_after_s = 1;
    if (status == SubmitStatus::queue_full) {
      error.code = "queue_full";
      error.message = "the server's request queue is full; retry after a short wait";
    } else if (status == SubmitStatus::queued_tokens_full) {
      error.code = "queued_tokens_full";
      error.message = fmt::format(
          "the prompts waiting in the server's queue already hold more than {} tokens "
          "(--max-queued-tokens); retry after a short wait",
          engine_loop_->options().max_queued_tokens);
    } else {
      // When enough of the work ahead should be done for a new request to start in time.
      const double over_ms = estimated_wait_ms - engine_loop_->options().max_queue_delay_ms;
      retry_after_s = std::max(1, static_cast<int>(std::ceil(over_ms / 1000.0)));
      error.code = "queue_delay";
      error.message = fmt::format(
          "this request would wait about {:.0f} ms before it starts, more than the server's "
          "limit of {:.0f} ms (--max-queue-delay-ms); retry in {} s",
          estimated_wait_ms, engine_loop_->options().max_queue_delay_ms, retry_after_s);
    }
    HttpResponse response = reject(error, error.code);
    response.set(http::field::retry_after, std::to_string(retry_after_s));
    return session->respond(std::move(response));
  }
  error.status = 503;
  error.type = "server_error";
  error.code = "shutting_down";
  error.message = "the server is shutting down";
  session->respond(reject(error, "shutting_down"));
}

// A gateway may set the priority in a header (X-Request-Priority) instead of the body; the body's
// field wins when both are there.
std::string OpenAiServer::trace_prompt_text(const TokenList& tokens) const {
  if (!trace_ || !trace_->options().include_text) return {};
  std::string text;
  for (Token token : tokens) text += engine_->token_piece(token);
  return text;
}

std::optional<ApiError> OpenAiServer::read_session_header(const HttpRequest& http_request,
                                                          CompletionParams& params) {
  const auto header = http_request.find("x-session-id");
  if (header == http_request.end() || !params.session.empty()) return std::nullopt;
  if (header->value().size() > kMaxSessionIdBytes) {
    return ApiError::invalid(
        fmt::format("the X-Session-Id header must be at most {} bytes", kMaxSessionIdBytes),
        "user");
  }
  params.session = std::string(header->value());
  return std::nullopt;
}

std::optional<ApiError> OpenAiServer::read_priority_header(const HttpRequest& http_request,
                                                           CompletionParams& params) {
  const auto header = http_request.find("x-request-priority");
  if (header == http_request.end() || params.priority) return std::nullopt;
  const std::string value(header->value());
  int priority = 0;
  const auto [end, status] = std::from_chars(value.data(), value.data() + value.size(), priority);
  if (status != std::errc() || end != value.data() + value.size() || priority < -kMaxPriority ||
      priority > kMaxPriority) {
    return ApiError::invalid(
        "the X-Request-Priority header must be an integer between -1000000 and 1000000 (lower "
        "runs sooner), got '" +
            value + "'",
        "priority");
  }
  params.priority = priority;
  return std::nullopt;
}

HttpResponse OpenAiServer::handle_tokenize(const HttpRequest& request) {
  json body = json::parse(request.body(), nullptr, false);
  if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
    return reject(
        ApiError::invalid("expected {\"content\": string, \"add_special\": bool}", "content"),
        "invalid_request");
  }
  // Type-checked before it is read: json::value() throws on a wrong type.
  const auto add_special_field = body.find("add_special");
  if (add_special_field != body.end() && !add_special_field->is_boolean() &&
      !add_special_field->is_null()) {
    return reject(ApiError::invalid("'add_special' must be true or false", "add_special"),
                  "invalid_request");
  }
  const bool add_special = add_special_field != body.end() && add_special_field->is_boolean() &&
                           add_special_field->get<bool>();
  const std::string text = body["content"].get<std::string>();
  const TokenList tokens =
      engine_ ? engine_->tokenize(text, add_special) : embeddings_->model().tokenize(text);
  return json_response(http::status::ok, {{"tokens", tokens}});
}

HttpResponse OpenAiServer::models_response() const {
  static const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
  json model = {{"id", options_.model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "brisk"},
                {"max_model_len", engine_ ? engine_->max_request_tokens()
                                          : embeddings_->model().max_input_tokens()}};
  return json_response(http::status::ok, {{"object", "list"}, {"data", json::array({model})}});
}

// A generative model serves the completion routes; an embedding model /v1/embeddings.
std::optional<ApiError> OpenAiServer::check_model_kind(std::string_view path) const {
  if (engine_ == nullptr && is_generation_route(path)) {
    return ApiError::invalid(fmt::format("'{}' is an embedding model: it serves /v1/embeddings, "
                                         "not {}",
                                         options_.model_name, path),
                             "model");
  }
  if (embeddings_ == nullptr && path == "/v1/embeddings") {
    return ApiError::invalid(
        fmt::format("'{}' is a generative model and makes no embeddings; serve an embedding "
                    "model (a GGUF that declares a pooling type, e.g. brisk serve --model "
                    "all-minilm-l6-v2) for /v1/embeddings",
                    options_.model_name),
        "model");
  }
  return std::nullopt;
}

HttpResponse OpenAiServer::reject(const ApiError& error, const std::string& reason) {
  metrics_.count_rejection(reason);
  return error_response(error);
}

std::string system_fingerprint_for(const std::string& numerics) {
  Sha256 hash;
  hash.update(reinterpret_cast<const unsigned char*>(numerics.data()), numerics.size());
  return "fp_" + hash.hex_digest().substr(0, 10);
}

}  // namespace brisk
