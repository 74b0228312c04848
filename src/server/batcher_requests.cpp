#include "server/batcher_requests.h"

#include <fmt/format.h>

#include <charconv>

#include "server/openai_json.h"

namespace brisk {

HttpResponse json_body_response(http::status status, const nlohmann::json& body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = dump_json(body);
  return response;
}

std::optional<int> priority_header(const HttpRequest& request, std::optional<ApiError>* error) {
  const auto header = request.find("x-request-priority");
  if (header == request.end()) return std::nullopt;
  const std::string value(header->value());
  int priority = 0;
  const auto [end, status] = std::from_chars(value.data(), value.data() + value.size(), priority);
  if (status != std::errc() || end != value.data() + value.size() || priority < -1000000 ||
      priority > 1000000) {
    *error = ApiError::invalid(
        "the X-Request-Priority header must be an integer between -1000000 and 1000000 (lower "
        "runs sooner), got '" +
            value + "'",
        "priority");
  }
  return priority;
}

ApiError outcome_error(const EmbeddingOutcome& outcome) {
  ApiError error;
  error.type = "server_error";
  error.message = outcome.error;
  if (outcome.status == EmbeddingOutcome::Status::deadline) {
    error.status = 408;
    error.type = "timeout_error";
    error.code = "deadline_exceeded";
  } else if (outcome.status == EmbeddingOutcome::Status::shutting_down) {
    error.status = 503;
    error.code = "shutting_down";
  } else {
    error.status = 500;
    error.code = "embedding_failed";
  }
  return error;
}

void add_usage_and_timings(nlohmann::json& body, int prompt_tokens, double tokenize_ms,
                           const EmbeddingOutcome& outcome, double model_load_ms) {
  body["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  body["brisk_timings"] = {{"tokenize_ms", tokenize_ms},
                           {"queue_ms", outcome.queue_ms},
                           {"compute_ms", outcome.compute_ms},
                           {"batches", outcome.batches}};
  if (model_load_ms > 0) body["brisk_timings"]["model_load_ms"] = model_load_ms;
}

void submit_to_batcher(
    EmbeddingBatcher& batcher, std::shared_ptr<EmbeddingJob> job,
    const std::shared_ptr<HttpSession>& session,
    const std::function<HttpResponse(const ApiError& error, const std::string& reason)>& reject) {
  const std::weak_ptr<EmbeddingJob> queued = job;
  const EmbeddingSubmit status = batcher.submit(std::move(job));
  if (status == EmbeddingSubmit::accepted) {
    // The batcher drops a cancelled job's waiting inputs when it next plans a batch (after the
    // running one, or at the window's end). It is not woken from here: once the job is gone, so
    // may be the model and its batcher.
    session->watch_for_disconnect([queued] {
      if (auto gone = queued.lock()) gone->cancelled = true;
    });
    return;
  }
  ApiError error;
  if (status == EmbeddingSubmit::queue_full) {
    error.status = 429;
    error.type = "rate_limit_exceeded";
    error.code = "queue_full";
    error.message = fmt::format(
        "the server's embedding queue is full ({} inputs waiting, --max-queued-inputs {}); retry "
        "after a short wait",
        batcher.queued_inputs(), batcher.options().max_queued_inputs);
    HttpResponse response = reject(error, "queue_full");
    response.set(http::field::retry_after, "1");
    return session->respond(std::move(response));
  }
  error.status = 503;
  error.type = "server_error";
  error.code = "shutting_down";
  error.message = "the server is shutting down";
  session->respond(reject(error, "shutting_down"));
}

}  // namespace brisk
