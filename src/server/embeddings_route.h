#pragma once

#include <memory>
#include <string>

#include "engine/embedding_model.h"
#include "sched/embedding_batcher.h"
#include "server/http_session.h"

namespace brisk {

// /v1/embeddings: checks and tokenizes a request on the I/O thread, queues its inputs in the
// dynamic batcher and answers when every input has its vector (docs/api.md, "Embeddings").
class EmbeddingsRoute {
 public:
  EmbeddingsRoute(EmbeddingModel& model, EmbeddingBatcher& batcher, EmbeddingMetrics& metrics,
                  std::string model_name);

  // `keep_loaded`: the request's hold on its model, kept until it is answered;
  // `model_load_ms`: how long it waited for the model to load (brisk_timings).
  void handle(const HttpRequest& request, const std::shared_ptr<HttpSession>& session,
              std::shared_ptr<const void> keep_loaded = nullptr, double model_load_ms = 0);
  EmbeddingModel& model() { return model_; }

 private:
  HttpResponse reject(const ApiError& error, const std::string& reason);

  EmbeddingModel& model_;
  EmbeddingBatcher& batcher_;
  EmbeddingMetrics& metrics_;
  const std::string model_name_;
};

}  // namespace brisk
