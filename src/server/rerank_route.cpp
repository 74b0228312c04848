#include "server/rerank_route.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "server/batcher_requests.h"
#include "server/rerank_params.h"

namespace brisk {
namespace {

using nlohmann::json;

// The query and document `index` as one input within `max_tokens`: cut the document (never the
// query) when `truncate` asks for it, else a 400.
std::variant<TokenList, ApiError> pair_within(const EmbeddingModel& model, const RerankParams& params,
                                              size_t index, int max_tokens) {
  const int per_doc = params.max_tokens_per_doc.value_or(0);
  RerankPair pair = model.tokenize_pair(params.query, params.documents[index], per_doc);
  // A cut document is detokenized and read again (a "rerank" template's text is filled in):
  // the count may move by a token, so cut again while it does not fit.
  for (int attempt = 0; params.truncate && attempt < 4; ++attempt) {
    const int over = static_cast<int>(pair.tokens.size()) - max_tokens;
    if (over <= 0) break;
    if (over >= pair.document_tokens) {
      return ApiError::invalid(
          fmt::format("'query' takes {} of the {} tokens this model reads at once, leaving no room "
                      "for a document; shorten it",
                      static_cast<int>(pair.tokens.size()) - pair.document_tokens, max_tokens),
          "query");
    }
    pair = model.tokenize_pair(params.query, params.documents[index], pair.document_tokens - over);
  }
  if (pair.tokens.size() > static_cast<size_t>(max_tokens)) {
    return ApiError::invalid(
        fmt::format("'documents[{}]' with the query is {} tokens, more than the {} this model "
                    "reads at once; shorten them, or send \"truncate\": true to cut the document",
                    index, pair.tokens.size(), max_tokens),
        "documents");
  }
  return std::move(pair.tokens);
}

}  // namespace

RerankRoute::RerankRoute(EmbeddingModel& model, EmbeddingBatcher& batcher,
                         EmbeddingMetrics& metrics, std::string model_name)
    : model_(model), batcher_(batcher), metrics_(metrics), model_name_(std::move(model_name)) {}

HttpResponse RerankRoute::reject(const ApiError& error, const std::string& reason) {
  metrics_.count_rejection(reason);
  return error_response(error);
}

void RerankRoute::handle(const HttpRequest& request, const std::shared_ptr<HttpSession>& session,
                         std::shared_ptr<const void> keep_loaded, double model_load_ms) {
  const TimePoint arrival = Clock::now();
  auto parsed = parse_rerank_params(request.body());
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    return session->respond(reject(*error, "invalid_request"));
  }
  auto params = std::make_shared<RerankParams>(std::move(std::get<RerankParams>(parsed)));
  std::optional<ApiError> header_error;
  const std::optional<int> header_priority = priority_header(request, &header_error);
  if (header_error) return session->respond(reject(*header_error, "invalid_request"));

  auto job = std::make_shared<EmbeddingJob>();
  job->priority = params->priority.value_or(header_priority.value_or(0));
  job->deadline_ms = params->deadline_ms;
  const int max_tokens = model_.max_input_tokens();
  int prompt_tokens = 0;
  for (size_t i = 0; i < params->documents.size(); ++i) {
    auto pair = pair_within(model_, *params, i, max_tokens);
    if (auto* error = std::get_if<ApiError>(&pair)) {
      return session->respond(reject(*error, error->param == "documents" ? "input_too_long"
                                                                         : "invalid_request"));
    }
    prompt_tokens += static_cast<int>(std::get<TokenList>(pair).size());
    job->inputs.push_back(std::move(std::get<TokenList>(pair)));
  }
  job->arrival = Clock::now();  // the window and the deadline count from the queue
  const double tokenize_ms = ms_between(arrival, job->arrival);
  metrics_.observe_tokenize(tokenize_ms / 1000.0);

  auto executor = session->executor();
  job->on_done = [session, executor, params, prompt_tokens, tokenize_ms, model_load_ms,
                  keep_loaded = std::move(keep_loaded),
                  model_name = model_name_](EmbeddingOutcome&& outcome) {
    net::post(executor, [session, params, prompt_tokens, tokenize_ms, model_load_ms, model_name,
                         outcome = std::move(outcome)] {
      if (outcome.status == EmbeddingOutcome::Status::cancelled) return;  // nobody to answer
      if (outcome.status != EmbeddingOutcome::Status::done) {
        return session->respond(error_response(outcome_error(outcome)));
      }
      // A reranker's first output is the relevance (llama-server reads the same one).
      const size_t stride = static_cast<size_t>(std::max(outcome.dimensions, 1));
      const size_t count = params->documents.size();
      std::vector<size_t> order(count);
      std::iota(order.begin(), order.end(), 0);
      auto score = [&](size_t i) { return outcome.vectors[i * stride]; };
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return score(a) > score(b); });
      order.resize(std::min(count, static_cast<size_t>(params->top_n.value_or(count))));
      json results = json::array();
      for (size_t i : order) {
        json result = {{"index", i}, {"relevance_score", score(i)}};
        if (params->return_documents) result["document"] = {{"text", params->documents[i]}};
        results.push_back(std::move(result));
      }
      json body = {{"object", "list"}, {"model", model_name}, {"results", std::move(results)}};
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
