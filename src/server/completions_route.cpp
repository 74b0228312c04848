#include "server/completions_route.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "common/clock.h"
#include "server/completion_exchange.h"

namespace brisk {

CompletionsRoute::CompletionsRoute(Engine& engine, EngineLoop& engine_loop,
                                   RejectionCounts& rejections, CompletionsRouteOptions options)
    : engine_(engine),
      engine_loop_(engine_loop),
      rejections_(rejections),
      options_(std::move(options)) {}

void CompletionsRoute::handle(const HttpRequest& http_request, CompletionKind kind,
                              const std::shared_ptr<HttpSession>& session,
                              std::shared_ptr<const void> keep_loaded, double model_load_ms) {
  const TimePoint arrival = Clock::now();
  // Refused now, before the body is parsed, when no request could be admitted: under overload
  // the refusals must stay cheaper than the work they shed.
  double precheck_wait_ms = 0;
  if (const SubmitStatus status = engine_loop_.precheck(&precheck_wait_ms);
      status != SubmitStatus::accepted) {
    return session->respond(refusal_response(status, precheck_wait_ms));
  }
  auto parsed = parse_completion_params(http_request.body(), kind, options_.generation);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    return session->respond(reject(*error, "invalid_request"));
  }
  CompletionParams params = std::move(std::get<CompletionParams>(parsed));
  auto prepared = prepare_prompts(params);
  if (auto* refusal = std::get_if<Refusal>(&prepared)) {
    return session->respond(reject(refusal->error, refusal->reason));
  }
  const auto& prompts = std::get<std::vector<PreparedPrompt>>(prepared);
  for (const auto& [token, bias] : params.sampling.logit_bias) {
    if (token >= engine_.vocabulary_size()) {
      return session->respond(reject(
          ApiError::invalid(fmt::format("'logit_bias' names token {}, but the vocabulary has {} "
                                        "tokens",
                                        token, engine_.vocabulary_size()),
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
                                           options_.system_fingerprint, engine_loop_, engine_);
  exchange->hold_model(std::move(keep_loaded), model_load_ms);
  std::vector<std::shared_ptr<Request>> requests;
  std::vector<std::string> prompt_texts;
  for (size_t i = 0; i < choices.size(); ++i) {
    exchange->add_choice(choices[i].request, std::move(echoes[i]), choices[i].tool_parser);
    requests.push_back(choices[i].request);
    if (trace_) prompt_texts.push_back(trace_prompt_text(choices[i].request->prompt_tokens));
  }
  if (trace_) exchange->record_to(*trace_, std::move(prompt_texts));
  double estimated_wait_ms = 0;
  const SubmitStatus status = engine_loop_.submit_all(std::move(requests), &estimated_wait_ms);
  if (status == SubmitStatus::accepted) return exchange->begin();

  exchange->abandon();  // the exchange will never hear from these requests
  session->respond(refusal_response(status, estimated_wait_ms));
}

std::string CompletionsRoute::trace_prompt_text(const TokenList& tokens) const {
  if (!trace_ || !trace_->options().include_text) return {};
  std::string text;
  for (Token token : tokens) text += engine_.token_piece(token);
  return text;
}

std::optional<ApiError> CompletionsRoute::read_session_header(const HttpRequest& http_request,
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

// A gateway may set the priority in a header (X-Request-Priority) instead of the body; the body's
// field wins when both are there.
std::optional<ApiError> CompletionsRoute::read_priority_header(const HttpRequest& http_request,
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

HttpResponse CompletionsRoute::refusal_response(SubmitStatus status, double estimated_wait_ms) {
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
          engine_loop_.options().max_queued_tokens);
    } else {
      // When enough of the work ahead should be done for a new request to start in time.
      const double over_ms = estimated_wait_ms - engine_loop_.options().max_queue_delay_ms;
      retry_after_s = std::max(1, static_cast<int>(std::ceil(over_ms / 1000.0)));
      error.code = "queue_delay";
      error.message = fmt::format(
          "this request would wait about {:.0f} ms for its first token (or make a request "
          "admitted before it wait that long), more than the server's limit of {:.0f} ms "
          "(--max-queue-delay-ms); retry in {} s",
          estimated_wait_ms, engine_loop_.options().max_queue_delay_ms, retry_after_s);
    }
    HttpResponse response = reject(error, error.code);
    response.set(http::field::retry_after, std::to_string(retry_after_s));
    return response;
  }
  error.status = 503;
  error.type = "server_error";
  error.code = "shutting_down";
  error.message = "the server is shutting down";
  return reject(error, "shutting_down");
}

HttpResponse CompletionsRoute::reject(const ApiError& error, const std::string& reason) {
  rejections_.count(options_.model_name, reason);
  return error_response(error);
}

}  // namespace brisk
