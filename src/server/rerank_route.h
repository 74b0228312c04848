#pragma once

#include <memory>
#include <string>

#include "engine/embedding_model.h"
#include "sched/embedding_batcher.h"
#include "server/http_session.h"

namespace brisk {

// /v1/rerank: tokenizes the query with each document on the I/O thread, as the reranker reads
// them (one input each), queues the pairs in the dynamic batcher and answers with the documents'
// scores, best first (docs/api.md, "Rerank").
class RerankRoute {
 public:
  RerankRoute(EmbeddingModel& model, EmbeddingBatcher& batcher, EmbeddingMetrics& metrics,
              std::string model_name);

  // `keep_loaded`: the request's hold on its model, kept until it is answered;
  // `model_load_ms`: how long it waited for the model to load (brisk_timings).
  void handle(const HttpRequest& request, const std::shared_ptr<HttpSession>& session,
              std::shared_ptr<const void> keep_loaded = nullptr, double model_load_ms = 0);

 private:
  HttpResponse reject(const ApiError& error, const std::string& reason);

  EmbeddingModel& model_;
  EmbeddingBatcher& batcher_;
  EmbeddingMetrics& metrics_;
  const std::string model_name_;
};

}  // namespace brisk
