#include "server/served_model.h"

#include <fmt/format.h>

#include <algorithm>

namespace brisk {
namespace {

// Output formats (response_format, grammar) converted and parsed, and those found compiled.
std::string render_grammar_metrics(const GrammarCompiler& grammars) {
  return fmt::format(
      "# HELP brisk_grammar_compilations_total Output formats (JSON schemas, GBNF) compiled into "
      "grammars, the ones refused included.\n"
      "# TYPE brisk_grammar_compilations_total counter\n"
      "brisk_grammar_compilations_total {}\n"
      "# HELP brisk_grammar_cache_hits_total Requests whose output format was already compiled.\n"
      "# TYPE brisk_grammar_cache_hits_total counter\n"
      "brisk_grammar_cache_hits_total {}\n",
      grammars.misses(), grammars.hits());
}

}  // namespace

std::unique_ptr<ServedModel> ServedModel::generative(std::unique_ptr<Engine> engine,
                                                     const SchedulerOptions& scheduler,
                                                     CompletionsRouteOptions route,
                                                     RejectionCounts& rejections) {
  std::unique_ptr<ServedModel> model(new ServedModel(route.model_name));
  model->engine_ = std::move(engine);
  model->serving_metrics_ = std::make_unique<ServingMetrics>();
  model->engine_loop_ =
      std::make_unique<EngineLoop>(*model->engine_, scheduler, *model->serving_metrics_);
  model->completions_ = std::make_unique<CompletionsRoute>(*model->engine_, *model->engine_loop_,
                                                           rejections, std::move(route));
  return model;
}

std::unique_ptr<ServedModel> ServedModel::embedding(std::unique_ptr<EmbeddingModel> embedding,
                                                    const BatchWindowOptions& batch_window,
                                                    std::string name) {
  std::unique_ptr<ServedModel> model(new ServedModel(name));
  model->embedding_model_ = std::move(embedding);
  model->embedding_metrics_ = std::make_unique<EmbeddingMetrics>();
  model->batcher_ = std::make_unique<EmbeddingBatcher>(*model->embedding_model_, batch_window,
                                                       *model->embedding_metrics_);
  model->embeddings_ = std::make_unique<EmbeddingsRoute>(
      *model->embedding_model_, *model->batcher_, *model->embedding_metrics_, std::move(name));
  return model;
}

ServedModel::~ServedModel() { shutdown(std::chrono::milliseconds(0)); }

bool ServedModel::answers_to(std::string_view name) const {
  return name == name_ || std::find(aliases_.begin(), aliases_.end(), name) != aliases_.end();
}

std::string_view ServedModel::kind_name() const {
  return kind() == ModelKind::generative ? "generative" : "embedding";
}

void ServedModel::share_device(DeviceArbiter& arbiter) {
  const DeviceArbiter::TenantId tenant = arbiter.add_tenant(device_share_);
  if (engine_loop_) engine_loop_->share_device(arbiter, tenant);
  if (batcher_) batcher_->share_device(arbiter, tenant);
}

void ServedModel::start() {
  if (engine_loop_) engine_loop_->start();
  if (batcher_) batcher_->start();
}

void ServedModel::shutdown(std::chrono::milliseconds drain_timeout) {
  if (engine_loop_) engine_loop_->shutdown(drain_timeout);
  if (batcher_) batcher_->shutdown(drain_timeout);
}

bool ServedModel::queue_full() const {
  return engine_loop_ ? engine_loop_->stats().queue_full() : embeddings_->queue_full();
}

int ServedModel::max_model_len() const {
  return engine_ ? engine_->max_request_tokens() : embedding_model_->max_input_tokens();
}

TokenList ServedModel::tokenize(std::string_view text, bool add_special) const {
  // A BERT tokenizer always adds its [CLS] and [SEP]: the embedding is of exactly those tokens.
  return engine_ ? engine_->tokenize(text, add_special) : embedding_model_->tokenize(text);
}

std::string ServedModel::render_metrics() const {
  if (embeddings_) return embeddings_->render_metrics();
  return serving_metrics_->render_prometheus(engine_loop_->stats()) +
         render_grammar_metrics(engine_->grammars());
}

std::string ServedModel::render_vllm_compat() const {
  if (!engine_loop_) return {};
  return ServingMetrics::render_vllm_compat(engine_loop_->stats(), name_);
}

}  // namespace brisk
