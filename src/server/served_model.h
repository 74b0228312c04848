#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"
#include "engine/embedding_model.h"
#include "engine/engine.h"
#include "sched/embedding_batcher.h"
#include "sched/engine_loop.h"
#include "sched/serving_metrics.h"
#include "server/completions_route.h"
#include "server/embeddings_route.h"
#include "server/rerank_route.h"
#include "server/rejection_counts.h"

namespace brisk {

// generative: the completion routes; embedding: /v1/embeddings; reranker: /v1/rerank. The last
// two are pooling models that run through the dynamic batcher.
enum class ModelKind { generative, embedding, reranker };
// loading: its loader runs (requests for it wait); unloaded: it takes no memory until a request
// or POST /models/load needs it (docs/models.md, "Load on demand").
enum class ModelState { unloaded, loading, loaded };
std::string_view model_state_name(ModelState state);

// What loading a model builds: a generative model's engine, with the scheduler and route options
// it runs under, or an embedding model with its batch window.
struct ModelParts {
  std::unique_ptr<Engine> engine;
  SchedulerOptions scheduler;
  CompletionsRouteOptions route;
  std::unique_ptr<EmbeddingModel> embedding_model;
  BatchWindowOptions batch_window;
};
// Loads a model's file (seconds to minutes); null with `error` when it cannot.
using ModelLoader = std::function<std::unique_ptr<ModelParts>(std::string* error)>;

// A loaded model's parts: its engine, engine loop and completion routes, or its embedding model,
// batcher and route. Whoever serves a request holds them (a shared_ptr) until it is answered;
// the model unloads only when nobody does.
class LoadedModel {
 public:
  ~LoadedModel();
  CompletionsRoute* completions() { return completions_.get(); }
  EmbeddingsRoute* embeddings() { return embeddings_.get(); }
  RerankRoute* reranks() { return reranks_.get(); }
  EngineLoop* engine_loop() { return engine_loop_.get(); }
  const Engine* engine() const { return engine_.get(); }
  const EmbeddingModel* embedding_model() const { return embedding_model_.get(); }
  TokenList tokenize(std::string_view text, bool add_special) const;

 private:
  friend class ServedModel;
  // Declared in construction order: each part refers to those above it, and is destroyed first.
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> engine_loop_;
  std::unique_ptr<CompletionsRoute> completions_;
  std::unique_ptr<EmbeddingModel> embedding_model_;
  std::unique_ptr<EmbeddingBatcher> batcher_;
  std::unique_ptr<EmbeddingsRoute> embeddings_;  // an embedding model's
  std::unique_ptr<RerankRoute> reranks_;         // a reranker's
};

// One model a server serves, loaded or not: its names, kind, share of the device and of the
// memory budget, the metrics that outlive its loads, and while loaded its parts.
class ServedModel {
 public:
  struct Options {
    std::string name;
    ModelKind kind = ModelKind::generative;
    std::vector<std::string> aliases;  // other names requests may use (a --models file's)
    DeviceTenantOptions share;         // its share of a device other models use too
    bool pinned = false;               // loaded at start and never unloaded
    uint64_t memory_bytes = 0;         // what it takes of --memory-budget while loaded
    int max_waiting = 64;              // requests that may wait for it to load
    int device = -1;                   // --device: the GPU it is on (-1: the default device)
  };
  ServedModel(Options options, ModelLoader loader, RejectionCounts& rejections);
  ~ServedModel();

  const std::string& name() const { return options_.name; }
  const std::vector<std::string>& aliases() const { return options_.aliases; }
  bool answers_to(std::string_view name) const;
  ModelKind kind() const { return options_.kind; }
  // "generative", "embedding" or "reranker", as /v1/models and error messages say it.
  std::string_view kind_name() const;
  bool pinned() const { return options_.pinned; }
  uint64_t memory_bytes() const { return options_.memory_bytes; }
  int max_waiting() const { return options_.max_waiting; }
  int device() const { return options_.device; }
  const DeviceTenantOptions& device_share() const { return options_.share; }

  ModelState state() const;
  // Its parts while loaded, held by the caller (a request); null while it is not loaded.
  std::shared_ptr<LoadedModel> hold();
  // Somebody holds its parts (requests in flight).
  bool busy() const;
  // Seconds since it was last held or seen busy; 0 while busy.
  double idle_seconds(TimePoint now);

  // Loads it on the calling thread and starts its engine loop or batcher; false with `error`
  // when its loader failed (it stays unloaded). `reason`: start, request or api (metrics).
  bool load(const std::string& reason, std::string* error);
  // Marks it loading, for the states others read while load() has not begun.
  void mark_loading();
  // Unloads it when nobody holds it; false (and nothing done) while somebody does.
  bool unload_if_idle(const std::string& reason);

  // Its steps (or batches) take turns of `arbiter` with the other models', from its next load.
  void share_device(DeviceArbiter& arbiter);
  // --trace-out: every finished request is recorded there (null: none), from its next load.
  void set_trace_writer(TraceWriter* trace);
  // Stops admitting, lets queued work finish for up to `drain_timeout` and stops (loaded only).
  void shutdown(std::chrono::milliseconds drain_timeout);

  bool queue_full();
  // The most tokens one request may hold (prompt and completion; an embedding input): as of
  // its last load, 0 before its first.
  int max_model_len() const;
  // Its /metrics text for one scrape. Both parts come from one snapshot of the scheduler, so a
  // scrape never shows a gauge under brisk's name and vLLM's with two different values.
  struct MetricsText {
    std::string brisk;  // its families, unlabelled (the server adds model="NAME" with several)
    std::string vllm;   // --metrics-compat vllm: its gauges under vLLM's names (else empty)
  };
  MetricsText render_metrics(bool with_vllm_compat);

 private:
  std::unique_ptr<LoadedModel> build(ModelParts parts);
  std::string render_residency() const;

  const Options options_;
  const ModelLoader loader_;
  RejectionCounts& rejections_;
  DeviceArbiter* arbiter_ = nullptr;
  DeviceArbiter::TenantId tenant_ = 0;
  TraceWriter* trace_ = nullptr;
  // Outlive its loads: counters go on across an unload and a reload.
  ServingMetrics serving_metrics_;
  EmbeddingMetrics embedding_metrics_;
  Histogram load_seconds_;

  mutable std::mutex mutex_;
  ModelState state_ = ModelState::unloaded;
  std::shared_ptr<LoadedModel> loaded_;
  TimePoint last_used_ = Clock::now();
  int max_model_len_ = 0;
  std::map<std::string, uint64_t> loads_by_reason_;
  std::map<std::string, uint64_t> unloads_by_reason_;
};

}  // namespace brisk
