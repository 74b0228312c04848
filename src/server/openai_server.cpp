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
#include "server/metrics_exposition.h"
#include "server/openai_json.h"
#include "server/scheduler_json.h"

namespace brisk {
namespace {

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
    {"/v1/embeddings", http::verb::post},  {"/models/load", http::verb::post},
    {"/models/unload", http::verb::post},
    // Jina's and Cohere's v1 clients post to /v1/rerank, Cohere's v2 client to /v2/rerank,
    // llama-server's users to /rerank too: one route, one body shape.
    {"/v1/rerank", http::verb::post},      {"/v2/rerank", http::verb::post},
    {"/rerank", http::verb::post},
};

bool is_rerank_path(std::string_view path) {
  return path == "/v1/rerank" || path == "/v2/rerank" || path == "/rerank";
}

}  // namespace

OpenAiServer::OpenAiServer(ModelRegistry& models, RejectionCounts& rejections,
                           ServerOptions options)
    : models_(models),
      rejections_(rejections),
      options_(std::move(options)),
      acceptor_(io_),
      accept_pause_(io_),
      connections_(options_.max_connections) {}

void OpenAiServer::set_trace_writer(TraceWriter* trace) {
  trace_ = trace;
  for (const auto& model : models_.models()) model->set_trace_writer(trace);
}

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
  models_.shutdown_all(options_.drain_timeout);
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
  rejections_.count("", "too_many_connections");
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
  rejections_.count("", "unauthorized");
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

  if (path == "/health")
    return session->respond(json_response(http::status::ok, {{"status", "ok"}}));
  if (path == "/ready") return session->respond(ready_response());
  if (path == "/metrics") return session->respond(metrics_response());
  if (path == "/debug/scheduler") return session->respond(handle_scheduler(request));
  if (path == "/v1/models") return session->respond(models_response());
  if (path == "/models/load" || path == "/models/unload") {
    return handle_residency(std::move(request), session, path == "/models/load");
  }
  if (path == "/tokenize") return handle_tokenize(std::move(request), session);
  auto found = model_for(request, path);
  if (auto* refusal = std::get_if<HttpResponse>(&found)) return session->respond(std::move(*refusal));
  // The request runs once its model is loaded: at once, or on this session's strand when the
  // load it waits for has finished. It holds the model until it is answered.
  auto shared = std::make_shared<HttpRequest>(std::move(request));
  auto serve = [this, shared, session, path](ModelRegistry::HoldOutcome held) {
    if (auto* error = std::get_if<ApiError>(&held)) {
      return session->respond(residency_refusal(*error));
    }
    ModelHold& hold = std::get<ModelHold>(held);
    LoadedModel& loaded = *hold.model;
    if (path == "/v1/embeddings") {
      return loaded.embeddings()->handle(*shared, session, std::move(hold.model),
                                         hold.load_wait_ms);
    }
    if (is_rerank_path(path)) {
      return loaded.reranks()->handle(*shared, session, std::move(hold.model), hold.load_wait_ms);
    }
    loaded.completions()->handle(
        *shared, path == "/v1/chat/completions" ? CompletionKind::chat : CompletionKind::text,
        session, std::move(hold.model), hold.load_wait_ms);
  };
  auto now = models_.hold(*std::get<ServedModel*>(found), [serve, session](auto held) {
    net::post(session->executor(), [serve, held = std::move(held)]() mutable {
      serve(std::move(held));
    });
  });
  if (now) serve(std::move(*now));
}

// A request whose model could not be held: too many wait for its load (429), or the load
// failed or took too long (503).
HttpResponse OpenAiServer::residency_refusal(const ApiError& error) {
  rejections_.count("", error.code);
  HttpResponse response = error_response(error);
  if (error.status == 429 || error.code == "model_load_timeout") {
    response.set(http::field::retry_after, "1");
  }
  return response;
}

// POST /models/load and /models/unload {"model": NAME}: load answers when the model is loaded;
// unload refuses a model with requests in flight (409) or a pinned one (400).
void OpenAiServer::handle_residency(HttpRequest&& request,
                                    const std::shared_ptr<HttpSession>& session, bool load) {
  const std::string_view path = load ? "/models/load" : "/models/unload";
  json body = json::parse(request.body(), nullptr, false);
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string()) {
    return session->respond(reject(
        ApiError::invalid(fmt::format("{} expects {{\"model\": NAME}}", path), "model"),
        "invalid_request"));
  }
  for (const auto& [field, value] : body.items()) {
    if (field != "model") {
      return session->respond(reject(
          ApiError::invalid(fmt::format("'{}' is not a field of {} (it takes model)", field, path),
                            field),
          "invalid_request"));
    }
  }
  const std::string name = body["model"].get<std::string>();
  ServedModel* model = models_.find(name);
  if (model == nullptr) return session->respond(reject_unknown_model(name));
  if (!load) {
    const auto result = models_.unload(*model);
    if (result == ModelRegistry::UnloadResult::unloaded) {
      return session->respond(json_response(
          http::status::ok, {{"model", model->name()}, {"state", "unloaded"}}));
    }
    ApiError error = ApiError::invalid(
        result == ModelRegistry::UnloadResult::pinned
            ? fmt::format("'{}' is pinned: it stays loaded (unpin it in the --models file)",
                          model->name())
            : fmt::format("'{}' has requests in flight; it unloads only when none are (retry "
                          "when they have ended)",
                          model->name()),
        "model");
    if (result == ModelRegistry::UnloadResult::busy) {
      error.status = 409;
      error.code = "model_busy";
    }
    return session->respond(reject(error, "invalid_request"));
  }
  const TimePoint began = Clock::now();
  auto answer = [this, began, name = model->name()](const ModelRegistry::HoldOutcome& held) {
    if (auto* error = std::get_if<ApiError>(&held)) return residency_refusal(*error);
    const double load_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - began).count();
    return json_response(http::status::ok, {{"model", name},
                                            {"state", "loaded"},
                                            {"load_ms", std::round(load_ms)}});
  };
  auto now = models_.hold(
      *model,
      [answer, session](const ModelRegistry::HoldOutcome& held) {
        net::post(session->executor(), [session, response = answer(held)]() mutable {
          session->respond(std::move(response));
        });
      },
      "api");
  if (now) session->respond(answer(*now));
}

std::variant<ServedModel*, HttpResponse> OpenAiServer::model_for(const HttpRequest& request,
                                                                 std::string_view path) {
  const ModelKind kind = path == "/v1/embeddings" ? ModelKind::embedding
                         : is_rerank_path(path)   ? ModelKind::reranker
                                                  : ModelKind::generative;
  // A request that names no model goes to the first one that serves its route.
  const std::optional<std::string> name = requested_model_name(request.body());
  ServedModel* model = name ? models_.find(*name) : models_.first_of(kind);
  if (!name && model == nullptr) model = &models_.default_model();  // answered below: wrong kind
  if (model == nullptr) return reject_unknown_model(*name);
  if (model->kind() == kind) return model;
  // What the named model serves, and what the route needs.
  const std::string_view serves = model->kind() == ModelKind::generative ? "the completion routes"
                                  : model->kind() == ModelKind::embedding ? "/v1/embeddings"
                                                                          : "/v1/rerank";
  std::string message;
  if (kind == ModelKind::embedding) {
    message = fmt::format(
        "'{}' is a {} model and makes no embeddings: it serves {}; name an embedding model (a "
        "GGUF that declares a mean, cls or last pooling, e.g. brisk serve --model "
        "all-minilm-l6-v2) for /v1/embeddings",
        model->name(), model->kind_name(), serves);
  } else if (kind == ModelKind::reranker) {
    message = fmt::format(
        "'{}' is a {} model and scores no documents: it serves {}; name a reranker (a GGUF "
        "whose pooling is rank: a cross-encoder with a classification head) for {}",
        model->name(), model->kind_name(), serves, path);
  } else {
    message = fmt::format("'{}' is {} model: it serves {}, not {}", model->name(),
                          model->kind() == ModelKind::embedding ? "an embedding" : "a reranker",
                          serves, path);
  }
  return reject(ApiError::invalid(message, "model"), "wrong_model_kind");
}

HttpResponse OpenAiServer::ready_response() const {
  if (draining_) return json_response(http::status::service_unavailable, {{"status", "draining"}});
  // A full queue answers 429 to every new request: a balancer should send them elsewhere. With
  // several models the server is ready while any of them takes requests.
  json states = json::object();
  bool any_ready = false;
  for (const auto& model : models_.models()) {
    // A model that is not loaded takes requests too: they wait for its load.
    const bool full = model->queue_full();
    any_ready = any_ready || !full;
    const ModelState state = model->state();
    states[model->name()] = full                          ? "queue_full"
                            : state == ModelState::loaded ? "ready"
                                                          : std::string(model_state_name(state));
  }
  json body = {{"status", any_ready ? "ready" : "queue_full"}};
  if (models_.several()) body["models"] = states;
  return json_response(any_ready ? http::status::ok : http::status::service_unavailable, body);
}

HttpResponse OpenAiServer::metrics_response() const {
  MetricsExposition exposition;
  std::string vllm_compat;  // vLLM's series carry its own model_name label: added last, unlabelled
  for (const auto& model : models_.models()) {
    ServedModel::MetricsText text = model->render_metrics(options_.vllm_metrics);
    exposition.add(text.brisk, models_.several() ? model->name() : "");
    vllm_compat += text.vllm;
  }
  exposition.add(rejections_.render_prometheus(models_.several()), "");
  exposition.add(models_.render_prometheus(), "");
  for (const auto& arbiter : models_.arbiters()) {
    exposition.add(arbiter->render_prometheus(), "");  // labelled by model already
  }
  exposition.add(connections_.render_prometheus(), "");
  if (trace_) exposition.add(trace_->render_prometheus(), "");
  if (!vllm_compat.empty()) exposition.add(vllm_compat, "");
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  response.body() = exposition.render();
  return response;
}

// The scheduler of the model named by ?model=NAME, else of the first generative model.
HttpResponse OpenAiServer::handle_scheduler(const HttpRequest& request) {
  const std::string_view target(request.target().data(), request.target().size());
  const size_t query = target.find("?model=");
  ServedModel* model = query == std::string_view::npos
                           ? models_.first_of(ModelKind::generative)
                           : models_.find(target.substr(query + 7));
  if (model == nullptr || model->kind() != ModelKind::generative) {
    ApiError error = ApiError::invalid(
        query == std::string_view::npos
            ? "no generative model is served: /debug/scheduler shows a completion engine's "
              "scheduler"
            : fmt::format("?model= names no generative model; this server serves {}",
                          models_.quoted_names()),
        "model");
    return reject(error, "invalid_request");
  }
  const std::shared_ptr<LoadedModel> loaded = model->hold();
  if (!loaded) {
    return reject(ApiError::invalid(fmt::format("'{}' is {}: it has no scheduler until it loads",
                                                model->name(), model_state_name(model->state())),
                                    "model"),
                  "invalid_request");
  }
  return json_response(http::status::ok, scheduler_json(loaded->engine_loop()->snapshot()));
}

void OpenAiServer::handle_tokenize(HttpRequest&& request,
                                   const std::shared_ptr<HttpSession>& session) {
  json body = json::parse(request.body(), nullptr, false);
  if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
    return session->respond(reject(
        ApiError::invalid("expected {\"content\": string, \"add_special\": bool}", "content"),
        "invalid_request"));
  }
  // Type-checked before it is read: json::value() throws on a wrong type.
  const auto add_special_field = body.find("add_special");
  if (add_special_field != body.end() && !add_special_field->is_boolean() &&
      !add_special_field->is_null()) {
    return session->respond(reject(
        ApiError::invalid("'add_special' must be true or false", "add_special"),
        "invalid_request"));
  }
  const bool add_special = add_special_field != body.end() && add_special_field->is_boolean() &&
                           add_special_field->get<bool>();
  for (const auto& [field, value] : body.items()) {
    // llama-server's parse_special and with_pieces, where they ask what brisk does.
    const bool asks_nothing = (field == "parse_special" && value == true) ||
                              (field == "with_pieces" && value == false);
    if (field == "parse_special" || field == "with_pieces") {
      if (asks_nothing) continue;
      return session->respond(reject(ApiError::invalid(field == "parse_special"
                                          ? "'parse_special' may only be true: brisk's "
                                            "/tokenize always reads special tokens in the text, "
                                            "as llama-server does by default"
                                          : "'with_pieces' may only be false: brisk's /tokenize "
                                            "answers token ids only",
                                      field),
                    "invalid_request"));
    }
    if (field != "content" && field != "add_special" && field != "model") {
      return session->respond(reject(ApiError::invalid(fmt::format("'{}' is not a field of /tokenize (it takes "
                                                  "content, add_special, parse_special and model)",
                                                  field),
                                      field),
                    "invalid_request"));
    }
  }
  ServedModel* model = &models_.default_model();
  if (const auto named = body.find("model"); named != body.end()) {
    if (!named->is_string()) {
      return session->respond(
          reject(ApiError::invalid("'model' must be a string", "model"), "invalid_request"));
    }
    model = models_.find(named->get<std::string>());
    if (model == nullptr) return session->respond(reject_unknown_model(named->get<std::string>()));
  }
  auto answer = [this, content = body["content"].get<std::string>(),
                 add_special](const ModelRegistry::HoldOutcome& held) {
    if (auto* error = std::get_if<ApiError>(&held)) return residency_refusal(*error);
    const TokenList tokens = std::get<ModelHold>(held).model->tokenize(content, add_special);
    return json_response(http::status::ok, {{"tokens", tokens}});
  };
  auto now = models_.hold(*model, [answer, session](const ModelRegistry::HoldOutcome& held) {
    net::post(session->executor(), [session, response = answer(held)]() mutable {
      session->respond(std::move(response));
    });
  });
  if (now) session->respond(answer(*now));
}

HttpResponse OpenAiServer::models_response() const {
  static const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
  json data = json::array();
  for (const auto& model : models_.models()) {
    const int max_model_len = model->max_model_len();
    data.push_back({{"id", model->name()},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "brisk"},
                    // Known once it has loaded.
                    {"max_model_len", max_model_len > 0 ? json(max_model_len) : json(nullptr)},
                    {"kind", model->kind_name()},
                    {"aliases", model->aliases()},
                    {"state", model_state_name(model->state())},
                    {"pinned", model->pinned()},
                    {"memory_bytes", model->memory_bytes()}});
  }
  return json_response(http::status::ok, {{"object", "list"}, {"data", data}});
}

// A 404 that lists the served names, for a request naming a model this server does not serve.
HttpResponse OpenAiServer::reject_unknown_model(const std::string& name) {
  ApiError error;
  error.status = 404;
  error.type = "not_found_error";
  error.code = "model_not_found";
  error.param = "model";
  error.message = fmt::format("the model '{}' does not exist here; this server serves {}", name,
                              models_.quoted_names());
  return reject(error, "unknown_model");
}

HttpResponse OpenAiServer::reject(const ApiError& error, const std::string& reason) {
  rejections_.count("", reason);
  return error_response(error);
}

std::string system_fingerprint_for(const std::string& numerics) {
  Sha256 hash;
  hash.update(reinterpret_cast<const unsigned char*>(numerics.data()), numerics.size());
  return "fp_" + hash.hex_digest().substr(0, 10);
}

}  // namespace brisk
