#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <thread>

#include "engine/llama_backend.h"
#include "ggml-backend.h"
#include "llama.h"

namespace brisk {
namespace {

// Distinct output formats kept compiled: a service sends a handful of schemas, each with every
// request; a client that makes one schema per request only cycles this.
constexpr size_t kCompiledGrammars = 64;

// The KV cache types llama.cpp's CPU and CUDA backends store and attend over (those
// llama-server's --cache-type-k/-v accept).
constexpr ggml_type kKvCacheTypes[] = {GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_F32,
                                       GGML_TYPE_Q8_0, GGML_TYPE_Q5_1, GGML_TYPE_Q5_0,
                                       GGML_TYPE_Q4_1, GGML_TYPE_Q4_0, GGML_TYPE_IQ4_NL};

std::optional<ggml_type> kv_cache_type(const std::string& name) {
  for (const ggml_type type : kKvCacheTypes) {
    if (name == ggml_type_name(type)) return type;
  }
  return std::nullopt;
}

// What a request's numbers depend on besides the request: the model file (name and size),
// llama.cpp's pinned source, the CPU features its kernels were built for, the accelerators the
// layers run on, the KV cache's types and layout, and how a step's rows are cut into attention
// calls on the CPU (`attention_rows`, 0: not cut). Threads split whole rows, so they are not in it.
std::string describe_numerics(const EngineOptions& options, int attention_rows) {
  std::error_code ignored;
  const std::filesystem::path model(options.model_path);
  std::string identity = "model " + model.filename().string() + " " +
                         std::to_string(std::filesystem::file_size(model, ignored)) +
                         "; llama.cpp " BRISK_LLAMA_SOURCE_ID "; " + llama_print_system_info();
  if (options.gpu_layers > 0) {
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
      ggml_backend_dev_t device = ggml_backend_dev_get(i);
      if (ggml_backend_dev_type(device) == GGML_BACKEND_DEVICE_TYPE_CPU) continue;
      identity += std::string("; device ") + ggml_backend_dev_name(device) + " " +
                  ggml_backend_dev_description(device);
    }
    identity += "; gpu layers " + std::to_string(options.gpu_layers);
  }
  identity += "; kv " + options.cache_type_k + "/" + options.cache_type_v +
              (options.kv_unified ? " unified" : " per-sequence") +
              (options.swa_full ? " swa-full" : "");
  if (attention_rows > 0) {
    identity += "; cpu attention calls of <= " + std::to_string(attention_rows) + " rows";
  }
  return identity;
}

}  // namespace

std::string kv_cache_type_names() {
  std::string names;
  for (const ggml_type type : kKvCacheTypes) {
    names += (names.empty() ? "" : ", ") + std::string(ggml_type_name(type));
  }
  return names;
}

bool is_kv_cache_type(const std::string& name) { return kv_cache_type(name).has_value(); }

std::unique_ptr<Engine> Engine::load(const EngineOptions& options, std::string* error) {
  init_llama_backend_once();
  std::unique_ptr<Engine> engine(new Engine());

  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = options.gpu_layers;
  GpuPlacement placement;
  if (!placement.apply(options.device, model_params, error)) return nullptr;
  engine->model_ = llama_model_load_from_file(options.model_path.c_str(), model_params);
  if (engine->model_ == nullptr) {
    *error = "could not load model '" + options.model_path +
             "' (is it a complete GGUF file? run with --log-level debug for llama.cpp's reason)";
    return nullptr;
  }
  engine->vocab_ = llama_model_get_vocab(engine->model_);
  engine->grammars_ = std::make_unique<GrammarCompiler>(engine->vocab_, kCompiledGrammars);
  engine->chat_template_ = ChatTemplate::choose(engine->model_, options.chat_template,
                                                options.chat_template_file, error);
  if (!engine->chat_template_) return nullptr;

  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  llama_context_params context_params = llama_context_default_params();
  context_params.n_ctx = static_cast<uint32_t>(options.ctx_size);
  context_params.n_batch = static_cast<uint32_t>(options.max_batched_tokens);
  context_params.n_ubatch = static_cast<uint32_t>(std::min(options.max_batched_tokens, 512));
  context_params.n_seq_max = static_cast<uint32_t>(options.max_seqs);
  context_params.n_threads = threads;
  context_params.n_threads_batch = threads;
  context_params.kv_unified = options.kv_unified;
  for (const auto& [name, type] : {std::pair{&options.cache_type_k, &context_params.type_k},
                                   std::pair{&options.cache_type_v, &context_params.type_v}}) {
    const std::optional<ggml_type> chosen = kv_cache_type(*name);
    if (!chosen) {
      *error = "unknown KV cache type '" + *name + "' (one of " + kv_cache_type_names() + ")";
      return nullptr;
    }
    *type = *chosen;
  }
  context_params.swa_full = options.swa_full;
  context_params.no_perf = true;
  engine->context_ = llama_init_from_model(engine->model_, context_params);
  if (engine->context_ == nullptr) {
    *error = "could not create a llama.cpp context with --ctx-size " +
             std::to_string(options.ctx_size) + " and --max-seqs " +
             std::to_string(options.max_seqs) +
             (ggml_is_quantized(context_params.type_v)
                  ? " (a quantized --cache-type-v needs flash attention, which this device's "
                    "backend may lack; or out of memory: try smaller values)"
                  : " (out of memory? try smaller values)");
    return nullptr;
  }
  engine->threadpool_ = CpuThreadpool::attach(engine->context_, threads, options.poll);
  engine->context_size_ = static_cast<int>(llama_n_ctx(engine->context_));
  engine->sequence_context_size_ = static_cast<int>(llama_n_ctx_seq(engine->context_));
  engine->sequence_ids_ = static_cast<int>(llama_n_seq_max(engine->context_));
  // Full-size window caches never drop a position, so every cached prefix stays reusable.
  engine->sliding_window_tokens_ = options.swa_full ? 0 : llama_model_n_swa(engine->model_);
  engine->batch_capacity_ = options.max_batched_tokens;
  engine->attention_on_gpu_ = options.gpu_layers > 0 && gpu_memory_bytes().has_value();
  engine->attention_rows_ = options.kv_unified && !engine->attention_on_gpu_
                                ? std::max(0, options.cpu_attention_rows)
                                : 0;
  engine->numerics_identity_ = describe_numerics(options, engine->attention_rows_);
  engine->batch_ =
      std::make_unique<llama_batch>(llama_batch_init(options.max_batched_tokens, 0, 1));
  return engine;
}

Engine::~Engine() {
  if (batch_) llama_batch_free(*batch_);
  if (context_) llama_free(context_);
  threadpool_.reset();
  if (model_) llama_model_free(model_);
}

TokenList Engine::tokenize(std::string_view text, bool add_special) const {
  // Parse special tokens like llama-server does, so templated prompts keep their markers.
  return tokenize_text(vocab_, text, add_special, true);
}

std::string Engine::token_piece(Token token) const { return token_text(vocab_, token); }

std::shared_ptr<TokenConstraint> Engine::compile_grammar(const GrammarRequest& request,
                                                         std::string* error) const {
  return grammars_->compile(request, error);
}

bool Engine::is_end_of_generation(Token token) const { return llama_vocab_is_eog(vocab_, token); }

bool Engine::apply_chat_template(const std::vector<ChatMessage>& messages, std::string* prompt,
                                 std::string* error) const {
  return chat_template_->apply(messages, prompt, error);
}

bool Engine::render_chat(const std::vector<ChatMessage>& messages, const ChatTools* tools,
                         ChatPrompt* rendered, std::string* error) const {
  return chat_template_->render(messages, tools, rendered, error);
}

int Engine::train_context_size() const { return llama_model_n_ctx_train(model_); }

int Engine::vocabulary_size() const { return llama_vocab_n_tokens(vocab_); }

int Engine::max_request_tokens() const {
  const int trained = train_context_size();
  return trained > 0 ? std::min(sequence_context_size_, trained) : sequence_context_size_;
}

std::string Engine::description() const {
  char buffer[256];
  const int32_t length = llama_model_desc(model_, buffer, sizeof(buffer));
  return std::string(buffer, static_cast<size_t>(std::max(length, 0)));
}

void Engine::clear_batch() { batch_->n_tokens = 0; }

int Engine::batch_size() const { return batch_->n_tokens; }

int Engine::add_to_batch(Token token, int position, int sequence, bool want_logits) {
  const int index = batch_->n_tokens;
  if (index >= batch_capacity_) return -1;  // the scheduler's budget keeps us from here
  batch_->token[index] = token;
  batch_->pos[index] = position;
  batch_->n_seq_id[index] = 1;
  batch_->seq_id[index][0] = sequence;
  batch_->logits[index] = want_logits ? 1 : 0;
  ++batch_->n_tokens;
  return index;
}

DecodeStatus Engine::decode() {
  logits_by_row_ = false;
  const int rows = batch_->n_tokens;
  if (attention_rows_ <= 0 || rows <= attention_rows_) return decode_rows(0, rows);
  row_sequences_.resize(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) row_sequences_[static_cast<size_t>(i)] = batch_->seq_id[i][0];
  const std::vector<AttentionCall> calls = plan_attention_calls(row_sequences_, attention_rows_);
  if (calls.size() == 1) return decode_rows(0, rows);
  return decode_in_calls(calls);
}

DecodeStatus Engine::decode_rows(int first, int rows) {
  llama_batch view = *batch_;
  view.n_tokens = rows;
  view.token += first;
  view.pos += first;
  view.n_seq_id += first;
  view.seq_id += first;
  view.logits += first;
  const int32_t result = llama_decode(context_, view);
  if (result == 0) return DecodeStatus::ok;
  if (result == 1) return DecodeStatus::no_kv_space;
  spdlog::error("llama_decode failed with code {} for a batch of {} tokens", result, rows);
  return DecodeStatus::failed;
}

// Runs the calls in order; each call but the last has its logits copied out before the next
// overwrites them. When a later call finds no room, the earlier ones' cells are taken out again,
// so the batch leaves nothing behind, as one llama_decode that found no room.
DecodeStatus Engine::decode_in_calls(const std::vector<AttentionCall>& calls) {
  const int rows = batch_->n_tokens;
  const size_t vocabulary = static_cast<size_t>(vocabulary_size());
  const AttentionCall& last = calls.back();
  size_t copied_rows = 0;
  for (int i = 0; i < rows; ++i) {
    if (batch_->logits[i] && (i < last.first || i >= last.first + last.rows)) ++copied_rows;
  }
  copied_logits_.resize(copied_rows * vocabulary);  // sized before any pointer into it is taken
  row_logits_.assign(static_cast<size_t>(rows), nullptr);
  float* copy_to = copied_logits_.data();
  for (size_t k = 0; k < calls.size(); ++k) {
    const AttentionCall& call = calls[k];
    const DecodeStatus status = decode_rows(call.first, call.rows);
    if (status != DecodeStatus::ok) {
      llama_memory_t memory = llama_get_memory(context_);
      for (size_t done = 0; done < k; ++done) {
        for (int i = calls[done].first; i < calls[done].first + calls[done].rows; ++i) {
          llama_memory_seq_rm(memory, batch_->seq_id[i][0], batch_->pos[i], -1);
        }
      }
      return status;
    }
    for (int i = call.first; i < call.first + call.rows; ++i) {
      if (!batch_->logits[i]) continue;
      const float* logits = llama_get_logits_ith(context_, i - call.first);
      if (k + 1 < calls.size()) {
        std::copy(logits, logits + vocabulary, copy_to);
        logits = copy_to;
        copy_to += vocabulary;
      }
      row_logits_[static_cast<size_t>(i)] = logits;
    }
  }
  logits_by_row_ = true;
  return DecodeStatus::ok;
}

void Engine::synchronize() { llama_synchronize(context_); }

const float* Engine::logits(int batch_index) {
  if (logits_by_row_) return row_logits_[static_cast<size_t>(batch_index)];
  return llama_get_logits_ith(context_, batch_index);
}

SampledToken Engine::sample(Sampler& sampler, int batch_index, int top_logprobs) {
  return sampler.sample(logits(batch_index), vocabulary_size(), top_logprobs);
}

void Engine::release_sequence(int sequence) {
  llama_memory_seq_rm(llama_get_memory(context_), sequence, -1, -1);
}

void Engine::copy_sequence_prefix(int source, int destination, int tokens) {
  llama_memory_t memory = llama_get_memory(context_);
  if (sequence_context_size_ == context_size_) {
    llama_memory_seq_cp(memory, source, destination, 0, tokens);
    return;
  }
  // Each sequence has its own buffer: llama.cpp copies between them only whole (the data on
  // the next decode), so the copy is trimmed to the prefix.
  llama_memory_seq_cp(memory, source, destination, -1, -1);
  llama_memory_seq_rm(memory, destination, tokens, -1);
}

void Engine::keep_sequence_prefix(int sequence, int tokens) {
  llama_memory_seq_rm(llama_get_memory(context_), sequence, tokens, -1);
}

int Engine::sequence_window_start(int sequence) const {
  if (sliding_window_tokens_ <= 0) return 0;
  return std::max(0,
                  static_cast<int>(llama_memory_seq_pos_min(llama_get_memory(context_), sequence)));
}

std::vector<uint8_t> Engine::save_sequence(int sequence) {
  std::vector<uint8_t> state(
      llama_state_seq_get_size_ext(context_, sequence, LLAMA_STATE_SEQ_FLAGS_NONE));
  const size_t written = llama_state_seq_get_data_ext(context_, state.data(), state.size(),
                                                      sequence, LLAMA_STATE_SEQ_FLAGS_NONE);
  state.resize(written);
  return state;
}

bool Engine::restore_sequence(int sequence, std::span<const uint8_t> state, int tokens) {
  llama_memory_t memory = llama_get_memory(context_);
  if (llama_state_seq_set_data_ext(context_, state.data(), state.size(), sequence,
                                   LLAMA_STATE_SEQ_FLAGS_NONE) == 0) {
    llama_memory_seq_rm(memory, sequence, -1, -1);
    return false;
  }
  llama_memory_seq_rm(memory, sequence, tokens, -1);
  return true;
}

}  // namespace brisk
