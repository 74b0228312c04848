#include "server/embeddings_route.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "server/embedding_params.h"
#include "server/openai_json.h"

namespace brisk {
namespace {

using nlohmann::json;

// OpenAI's base64 embeddings: the little-endian float32 bytes of the vector.
std::string base64_of_floats(const float* values, size_t count) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(count * sizeof(float), '\0');
  std::memcpy(bytes.data(), values, bytes.size());  // x86-64 and aarch64 are little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const auto byte = [&bytes](size_t at) {
      return at < bytes.size() ? static_cast<unsigned char>(bytes[at]) : 0u;
    };
    const uint32_t group = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(group >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[group & 63] : '=';
  }
  return out;
}

HttpResponse json_response(http::status status, const json& body) {
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

}  // namespace

EmbeddingsRoute::EmbeddingsRoute(EmbeddingModel& model, EmbeddingBatcher& batcher,
                                 EmbeddingMetrics& metrics, std::string model_name)
    : model_(model), batcher_(batcher), metrics_(metrics), model_name_(std::move(model_name)) {}

std::string EmbeddingsRoute::render_metrics() const {
  return metrics_.render_prometheus(batcher_.queued_inputs(), batcher_.queued_requests());
}

bool EmbeddingsRoute::queue_full() const {
  return batcher_.queued_inputs() >= batcher_.options().max_queued_inputs;
}

HttpResponse EmbeddingsRoute::reject(const ApiError& error, const std::string& reason) {
  metrics_.count_rejection(reason);
  return error_response(error);
}

void EmbeddingsRoute::handle(const HttpRequest& request,
                             const std::shared_ptr<HttpSession>& session,
                             std::shared_ptr<const void> keep_loaded, double model_load_ms) {
  const TimePoint arrival = Clock::now();
  auto parsed = parse_embedding_params(request.body());
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    return session->respond(reject(*error, "invalid_request"));
  }
  EmbeddingParams params = std::move(std::get<EmbeddingParams>(parsed));
  // The server chose this route by the model the body names (server/model_registry.h).
  if (params.dimensions && *params.dimensions != model_.dimensions()) {
    return session->respond(reject(
        ApiError::invalid(fmt::format("'dimensions' {} is not available: {} makes vectors of {} "
                                      "dimensions and cannot shorten them",
                                      *params.dimensions, model_name_, model_.dimensions()),
                          "dimensions"),
        "invalid_request"));
  }
  std::optional<ApiError> header_error;
  const std::optional<int> header_priority = priority_header(request, &header_error);
  if (header_error) return session->respond(reject(*header_error, "invalid_request"));

  auto job = std::make_shared<EmbeddingJob>();
  job->priority = params.priority.value_or(header_priority.value_or(0));
  job->deadline_ms = params.deadline_ms;
  const int max_tokens = model_.max_input_tokens();
  const int vocabulary = model_.vocabulary_size();
  int prompt_tokens = 0;
  for (size_t i = 0; i < params.inputs.size(); ++i) {
    EmbeddingInput& input = params.inputs[i];
    TokenList tokens = input.tokens ? std::move(*input.tokens) : model_.tokenize(input.text);
    for (Token token : tokens) {
      if (token >= vocabulary) {
        return session->respond(reject(
            ApiError::invalid(fmt::format("'input[{}]' holds token {}, but the vocabulary has {} "
                                          "tokens",
                                          i, token, vocabulary),
                              "input"),
            "invalid_request"));
      }
    }
    if (tokens.size() > static_cast<size_t>(max_tokens)) {
      if (!params.truncate) {
        return session->respond(reject(
            ApiError::invalid(fmt::format("'input[{}]' is {} tokens, more than the {} this model "
                                          "embeds at once; shorten it, or send \"truncate\": "
                                          "true to embed its first {} tokens",
                                          i, tokens.size(), max_tokens, max_tokens),
                              "input"),
            "input_too_long"));
      }
      model_.truncate(&tokens, max_tokens);
    }
    if (tokens.empty()) {
      return session->respond(
          reject(ApiError::invalid(fmt::format("'input[{}]' has no tokens", i), "input"),
                 "invalid_request"));
    }
    prompt_tokens += static_cast<int>(tokens.size());
    job->inputs.push_back(std::move(tokens));
  }
  job->arrival = Clock::now();  // the window and the deadline count from the queue
  const double tokenize_ms = ms_between(arrival, job->arrival);
  metrics_.observe_tokenize(tokenize_ms / 1000.0);

  const bool base64 = params.base64;
  auto executor = session->executor();
  job->on_done = [session, executor, base64, prompt_tokens, tokenize_ms, model_load_ms,
                  keep_loaded = std::move(keep_loaded),
                  model_name = model_name_](EmbeddingOutcome&& outcome) {
    net::post(executor, [session, base64, prompt_tokens, tokenize_ms, model_load_ms, model_name,
                         outcome = std::move(outcome)] {
      if (outcome.status != EmbeddingOutcome::Status::done) {
        ApiError error;
        error.type = "server_error";
        error.message = outcome.error;
        if (outcome.status == EmbeddingOutcome::Status::deadline) {
          error.status = 408;
          error.type = "timeout_error";
          error.code = "deadline_exceeded";
        } else if (outcome.status == EmbeddingOutcome::Status::cancelled) {
          return;  // nobody is left to answer
        } else if (outcome.status == EmbeddingOutcome::Status::shutting_down) {
          error.status = 503;
          error.code = "shutting_down";
        } else {
          error.status = 500;
          error.code = "embedding_failed";
        }
        return session->respond(error_response(error));
      }
      json data = json::array();
      const size_t dimensions = static_cast<size_t>(outcome.dimensions);
      const size_t count = dimensions == 0 ? 0 : outcome.vectors.size() / dimensions;
      for (size_t i = 0; i < count; ++i) {
        const float* vector = outcome.vectors.data() + i * dimensions;
        json item = {{"object", "embedding"}, {"index", i}};
        if (base64) {
          item["embedding"] = base64_of_floats(vector, dimensions);
        } else {
          item["embedding"] = std::vector<float>(vector, vector + dimensions);
        }
        data.push_back(std::move(item));
      }
      json body = {{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model_name},
                   {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
                   {"brisk_timings",
                    {{"tokenize_ms", tokenize_ms},
                     {"queue_ms", outcome.queue_ms},
                     {"compute_ms", outcome.compute_ms},
                     {"batches", outcome.batches}}}};
      if (model_load_ms > 0) body["brisk_timings"]["model_load_ms"] = model_load_ms;
      session->respond(json_response(http::status::ok, body));
    });
  };
  const std::weak_ptr<EmbeddingJob> queued = job;
  const EmbeddingSubmit status = batcher_.submit(std::move(job));
  if (status == EmbeddingSubmit::accepted) {
    // A client that goes away takes its inputs still waiting out of the queue: the batcher
    // drops them when it next plans a batch (after the running one, or at the window's end).
    // It is not woken from here: once the job is gone, so may be the model and its batcher.
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
        batcher_.queued_inputs(), batcher_.options().max_queued_inputs);
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
