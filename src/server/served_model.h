#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/embedding_model.h"
#include "engine/engine.h"
#include "sched/embedding_batcher.h"
#include "sched/engine_loop.h"
#include "sched/serving_metrics.h"
#include "server/completions_route.h"
#include "server/embeddings_route.h"
#include "server/rejection_counts.h"

namespace brisk {

enum class ModelKind { generative, embedding };

// One model a server serves, with everything that is its own: a generative model's engine,
// engine loop, metrics and completion routes, or an embedding model's batcher, metrics and
// /v1/embeddings route.
class ServedModel {
 public:
  static std::unique_ptr<ServedModel> generative(std::unique_ptr<Engine> engine,
                                                 const SchedulerOptions& scheduler,
                                                 CompletionsRouteOptions route,
                                                 RejectionCounts& rejections);
  static std::unique_ptr<ServedModel> embedding(std::unique_ptr<EmbeddingModel> model,
                                                const BatchWindowOptions& batch_window,
                                                std::string name);
  ~ServedModel();

  const std::string& name() const { return name_; }
  // Other names requests may use for it (a --models file's `aliases`).
  const std::vector<std::string>& aliases() const { return aliases_; }
  void set_aliases(std::vector<std::string> aliases) { aliases_ = std::move(aliases); }
  bool answers_to(std::string_view name) const;
  ModelKind kind() const { return completions_ ? ModelKind::generative : ModelKind::embedding; }
  // "generative" or "embedding", as /v1/models and error messages say it.
  std::string_view kind_name() const;
  // The route of its kind; null for the other kind.
  CompletionsRoute* completions() { return completions_.get(); }
  EmbeddingsRoute* embeddings() { return embeddings_.get(); }
  EngineLoop* engine_loop() { return engine_loop_.get(); }
  const Engine* engine() const { return engine_.get(); }
  const EmbeddingModel* embedding_model() const { return embedding_model_.get(); }

  // Its share of a device other models use too: weight and criticality (docs/models.md).
  DeviceTenantOptions& device_share() { return device_share_; }
  // Its steps (or batches) take turns of `arbiter` with the other models'. Before start().
  void share_device(DeviceArbiter& arbiter);

  // Starts its engine thread or batcher; shutdown() stops admitting, lets queued work finish
  // for up to `drain_timeout` and stops it.
  void start();
  void shutdown(std::chrono::milliseconds drain_timeout);
  bool queue_full() const;
  // The most tokens one request may hold (prompt and completion; an embedding input).
  int max_model_len() const;
  TokenList tokenize(std::string_view text, bool add_special) const;
  // Its /metrics families, unlabelled (the server adds model="NAME" when it serves several).
  std::string render_metrics() const;
  // --metrics-compat vllm: its gauges under vLLM's names; empty for an embedding model.
  std::string render_vllm_compat() const;

 private:
  explicit ServedModel(std::string name) : name_(name) { device_share_.name = std::move(name); }

  const std::string name_;
  std::vector<std::string> aliases_;
  DeviceTenantOptions device_share_;
  // Declared in construction order: each part refers to those above it, and is destroyed first.
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServingMetrics> serving_metrics_;
  std::unique_ptr<EngineLoop> engine_loop_;
  std::unique_ptr<CompletionsRoute> completions_;
  std::unique_ptr<EmbeddingModel> embedding_model_;
  std::unique_ptr<EmbeddingMetrics> embedding_metrics_;
  std::unique_ptr<EmbeddingBatcher> batcher_;
  std::unique_ptr<EmbeddingsRoute> embeddings_;
};

}  // namespace brisk
