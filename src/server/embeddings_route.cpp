#include "server/embeddings_route.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "server/batcher_requests.h"
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

}  // namespace

EmbeddingsRoute::EmbeddingsRoute(EmbeddingModel& model, EmbeddingBatcher& batcher,
                                 EmbeddingMetrics& metrics, std::string model_name)
    : model_(model), batcher_(batcher), metrics_(metrics), model_name_(std::move(model_name)) {}

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
      if (outcome.status == EmbeddingOutcome::Status::cancelled) return;  // nobody to answer
      if (outcome.status != EmbeddingOutcome::Status::done) {
        return session->respond(error_response(outcome_error(outcome)));
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
      json body = {{"object", "list"}, {"data", std::move(data)}, {"model", model_name}};
      add_usage_and_timings(body, prompt_tokens, tokenize_ms, outcome, model_load_ms);
      session->respond(json_body_response(http::status::ok, body));
    });
  };
  submit_to_batcher(batcher_, std::move(job), session,
                    [this](const ApiError& error, const std::string& reason) {
                      return reject(error, reason);
                    });
}

}  // namespace brisk
