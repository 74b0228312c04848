#include "server/served_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

// A load takes from a fraction of a second (a small model whose file is in the page cache) to
// minutes (a large one read from disk).
std::vector<double> load_seconds_buckets() {
  return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

}  // namespace

std::string_view model_state_name(ModelState state) {
  switch (state) {
    case ModelState::unloaded:
      return "unloaded";
    case ModelState::loading:
      return "loading";
    case ModelState::loaded:
      return "loaded";
  }
  return "unloaded";
}

LoadedModel::~LoadedModel() {
  if (engine_loop_) engine_loop_->shutdown(std::chrono::milliseconds(0));
  if (batcher_) batcher_->shutdown(std::chrono::milliseconds(0));
}

TokenList LoadedModel::tokenize(std::string_view text, bool add_special) const {
  // A BERT tokenizer always adds its [CLS] and [SEP]: the embedding is of exactly those tokens.
  return engine_ ? engine_->tokenize(text, add_special) : embedding_model_->tokenize(text);
}

ServedModel::ServedModel(Options options, ModelLoader loader, RejectionCounts& rejections)
    : options_(std::move(options)),
      loader_(std::move(loader)),
      rejections_(rejections),
      load_seconds_(load_seconds_buckets()) {}

ServedModel::~ServedModel() { shutdown(std::chrono::milliseconds(0)); }

bool ServedModel::answers_to(std::string_view name) const {
  return name == options_.name ||
         std::find(options_.aliases.begin(), options_.aliases.end(), name) !=
             options_.aliases.end();
}

std::string_view ServedModel::kind_name() const {
  switch (kind()) {
    case ModelKind::generative:
      return "generative";
    case ModelKind::embedding:
      return "embedding";
    case ModelKind::reranker:
      return "reranker";
  }
  return "generative";
}

ModelState ServedModel::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

std::shared_ptr<LoadedModel> ServedModel::hold() {
  std::lock_guard lock(mutex_);
  if (state_ != ModelState::loaded) return nullptr;
  last_used_ = Clock::now();
  return loaded_;
}

bool ServedModel::busy() const {
  std::lock_guard lock(mutex_);
  // New holders are made only under this mutex: nobody else holds it when this is one.
  return loaded_ && loaded_.use_count() > 1;
}

double ServedModel::idle_seconds(TimePoint now) {
  std::lock_guard lock(mutex_);
  if (loaded_ && loaded_.use_count() > 1) {
    last_used_ = now;
    return 0;
  }
  return std::chrono::duration<double>(now - last_used_).count();
}

void ServedModel::mark_loading() {
  std::lock_guard lock(mutex_);
  if (state_ == ModelState::unloaded) state_ = ModelState::loading;
}

bool ServedModel::load(const std::string& reason, std::string* error) {
  {
    std::lock_guard lock(mutex_);
    if (state_ == ModelState::loaded) return true;
    state_ = ModelState::loading;
  }
  const TimePoint began = Clock::now();
  std::unique_ptr<ModelParts> parts = loader_(error);
  std::shared_ptr<LoadedModel> loaded;
  if (parts) loaded = build(std::move(*parts));
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  std::lock_guard lock(mutex_);
  if (!loaded) {
    state_ = ModelState::unloaded;
    return false;
  }
  load_seconds_.observe(seconds);
  ++loads_by_reason_[reason];
  max_model_len_ = loaded->engine_ ? loaded->engine_->max_request_tokens()
                                   : loaded->embedding_model_->max_input_tokens();
  loaded_ = std::move(loaded);
  last_used_ = Clock::now();
  state_ = ModelState::loaded;
  spdlog::info("{}: loaded in {:.2f} s ({})", options_.name, seconds, reason);
  return true;
}

std::unique_ptr<LoadedModel> ServedModel::build(ModelParts parts) {
  auto loaded = std::make_unique<LoadedModel>();
  if (parts.engine) {
    loaded->engine_ = std::move(parts.engine);
    loaded->engine_loop_ =
        std::make_unique<EngineLoop>(*loaded->engine_, parts.scheduler, serving_metrics_);
    loaded->completions_ = std::make_unique<CompletionsRoute>(
        *loaded->engine_, *loaded->engine_loop_, rejections_, std::move(parts.route));
    loaded->completions_->set_trace_writer(trace_);
    if (arbiter_) loaded->engine_loop_->share_device(*arbiter_, tenant_);
    loaded->engine_loop_->start();
  } else {
    loaded->embedding_model_ = std::move(parts.embedding_model);
    loaded->batcher_ = std::make_unique<EmbeddingBatcher>(
        *loaded->embedding_model_, parts.batch_window, embedding_metrics_);
    if (kind() == ModelKind::reranker) {
      loaded->reranks_ = std::make_unique<RerankRoute>(*loaded->embedding_model_, *loaded->batcher_,
                                                       embedding_metrics_, options_.name);
    } else {
      loaded->embeddings_ = std::make_unique<EmbeddingsRoute>(
          *loaded->embedding_model_, *loaded->batcher_, embedding_metrics_, options_.name);
    }
    if (arbiter_) loaded->batcher_->share_device(*arbiter_, tenant_);
    loaded->batcher_->start();
  }
  return loaded;
}

bool ServedModel::unload_if_idle(const std::string& reason) {
  std::shared_ptr<LoadedModel> parts;
  {
    std::lock_guard lock(mutex_);
    if (state_ != ModelState::loaded) return true;
    if (loaded_.use_count() > 1) return false;
    parts = std::move(loaded_);
    state_ = ModelState::unloaded;
    ++unloads_by_reason_[reason];
  }
  parts.reset();  // stops its thread and frees its memory, outside the lock
  spdlog::info("{}: unloaded ({})", options_.name, reason);
  return true;
}

void ServedModel::share_device(DeviceArbiter& arbiter) {
  arbiter_ = &arbiter;
  tenant_ = arbiter.add_tenant(options_.share);
}

void ServedModel::set_trace_writer(TraceWriter* trace) {
  trace_ = trace;
  if (auto loaded = hold(); loaded && loaded->completions_) {
    loaded->completions_->set_trace_writer(trace);
  }
}

void ServedModel::shutdown(std::chrono::milliseconds drain_timeout) {
  std::shared_ptr<LoadedModel> loaded;
  {
    std::lock_guard lock(mutex_);
    loaded = loaded_;
  }
  if (!loaded) return;
  if (loaded->engine_loop_) loaded->engine_loop_->shutdown(drain_timeout);
  if (loaded->batcher_) loaded->batcher_->shutdown(drain_timeout);
}

bool ServedModel::queue_full() {
  std::shared_ptr<LoadedModel> loaded = hold();
  if (!loaded) return false;  // requests wait for its load, up to max_waiting
  return loaded->engine_loop_ ? loaded->engine_loop_->stats().queue_full()
                              : loaded->batcher_->queue_full();
}

int ServedModel::max_model_len() const {
  std::lock_guard lock(mutex_);
  return max_model_len_;
}

ServedModel::MetricsText ServedModel::render_metrics(bool with_vllm_compat) {
  std::shared_ptr<LoadedModel> loaded;
  {
    std::lock_guard lock(mutex_);
    loaded = loaded_;  // not a use: /metrics does not keep a model loaded
  }
  MetricsText out;
  if (kind() != ModelKind::generative) {
    out.brisk = loaded ? embedding_metrics_.render_prometheus(loaded->batcher_->queued_inputs(),
                                                              loaded->batcher_->queued_requests())
                       : embedding_metrics_.render_prometheus(0, 0);
  } else {
    const SchedulerStats stats = loaded ? loaded->engine_loop_->stats() : SchedulerStats{};
    out.brisk = serving_metrics_.render_prometheus(stats);
    if (loaded) out.brisk += render_grammar_metrics(loaded->engine_->grammars());
    if (loaded && with_vllm_compat) {
      out.vllm = ServingMetrics::render_vllm_compat(stats, options_.name);
    }
  }
  out.brisk += render_residency();
  return out;
}

std::string ServedModel::render_residency() const {
  std::lock_guard lock(mutex_);
  std::string out =
      "# HELP brisk_model_state 1 for the state the model is in (loaded, loading, unloaded).\n"
      "# TYPE brisk_model_state gauge\n";
  for (ModelState state : {ModelState::loaded, ModelState::loading, ModelState::unloaded}) {
    out += fmt::format("brisk_model_state{{state=\"{}\"}} {}\n", model_state_name(state),
                       state == state_ ? 1 : 0);
  }
  out += fmt::format(
      "# HELP brisk_model_memory_bytes What the model takes of --memory-budget while loaded "
      "(weights, KV cache, compute buffers, host cache).\n"
      "# TYPE brisk_model_memory_bytes gauge\n"
      "brisk_model_memory_bytes {}\n",
      options_.memory_bytes);
  out +=
      "# HELP brisk_model_loads_total Loads of the model, by reason (start, request, api).\n"
      "# TYPE brisk_model_loads_total counter\n";
  for (const auto& [reason, count] : loads_by_reason_) {
    out += fmt::format("brisk_model_loads_total{{reason=\"{}\"}} {}\n", reason, count);
  }
  out +=
      "# HELP brisk_model_unloads_total Unloads of the model, by reason (keep_alive, memory, "
      "api).\n"
      "# TYPE brisk_model_unloads_total counter\n";
  for (const auto& [reason, count] : unloads_by_reason_) {
    out += fmt::format("brisk_model_unloads_total{{reason=\"{}\"}} {}\n", reason, count);
  }
  out +=
      "# HELP brisk_model_load_seconds Time to load the model: its file read, its context and "
      "KV cache made.\n"
      "# TYPE brisk_model_load_seconds histogram\n";
  out += load_seconds_.render_prometheus("brisk_model_load_seconds");
  return out;
}

}  // namespace brisk
