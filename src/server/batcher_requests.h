#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sched/embedding_batcher.h"
#include "server/api_error.h"
#include "server/http_session.h"

namespace brisk {

// What /v1/embeddings and /v1/rerank share: each queues one job of tokenized inputs in its
// model's dynamic batcher (sched/embedding_batcher.h) and answers when all have run.

HttpResponse json_body_response(http::status status, const nlohmann::json& body);

// The X-Request-Priority header (lower runs sooner), or nullopt; a bad one sets `error`.
std::optional<int> priority_header(const HttpRequest& request, std::optional<ApiError>* error);

// The error a job that did not finish answers with (deadline 408, shutting down 503, failed
// 500). Not for `done`, nor `cancelled` (nobody is left to answer).
ApiError outcome_error(const EmbeddingOutcome& outcome);

// A done job's answer's "usage" (its `prompt_tokens`, all of them input) and "brisk_timings"
// (tokenize, queue and compute ms, batches; the model's load when the request waited for it).
void add_usage_and_timings(nlohmann::json& body, int prompt_tokens, double tokenize_ms,
                           const EmbeddingOutcome& outcome, double model_load_ms);

// Submits `job` (its on_done set). Accepted: a client that goes away takes its inputs still
// waiting out of the queue. Refused: answers 429 (queue full, with Retry-After) or 503 itself,
// through `reject`, which counts the rejection and makes the response.
void submit_to_batcher(
    EmbeddingBatcher& batcher, std::shared_ptr<EmbeddingJob> job,
    const std::shared_ptr<HttpSession>& session,
    const std::function<HttpResponse(const ApiError& error, const std::string& reason)>& reject);

}  // namespace brisk
