#include "engine/embedding_model.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/gguf_metadata.h"
#include "engine/llama_backend.h"
#include "llama.h"

namespace brisk {
namespace {

// The unit length OpenAI's embeddings have (llama-server's default embd_normalize, 2).
void normalize_into(const float* vector, int dimensions, float* out) {
  double sum = 0;
  for (int i = 0; i < dimensions; ++i) sum += static_cast<double>(vector[i]) * vector[i];
  const double scale = sum > 0 ? 1.0 / std::sqrt(sum) : 0.0;
  for (int i = 0; i < dimensions; ++i) out[i] = static_cast<float>(vector[i] * scale);
}

}  // namespace

FilePooling pooling_of_model_file(const std::string& path) {
  std::string ignored;
  const std::optional<GgufMetadata> metadata = read_gguf_metadata(path, &ignored);
  const int pooling =
      metadata ? static_cast<int>(metadata->arch_number("pooling_type").value_or(0)) : 0;
  if (pooling <= 0) return FilePooling::none;
  return pooling == LLAMA_POOLING_TYPE_RANK ? FilePooling::rank : FilePooling::embedding;
}

std::unique_ptr<EmbeddingModel> EmbeddingModel::load(const EmbeddingModelOptions& options,
                                                     std::string* error) {
  init_llama_backend_once();
  std::unique_ptr<EmbeddingModel> model(new EmbeddingModel());
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = options.gpu_layers;
  GpuPlacement placement;
  if (!placement.apply(options.device, model_params, error)) return nullptr;
  model->model_ = llama_model_load_from_file(options.model_path.c_str(), model_params);
  if (model->model_ == nullptr) {
    *error = "could not load model '" + options.model_path +
             "' (is it a complete GGUF file? run with --log-level debug for llama.cpp's reason)";
    return nullptr;
  }
  model->vocab_ = llama_model_get_vocab(model->model_);
  const int max_inputs = static_cast<int>(llama_max_parallel_sequences());
  if (options.max_batch_inputs < 1 || options.max_batch_inputs > max_inputs) {
    *error = "--max-batch-inputs must be between 1 and " + std::to_string(max_inputs) +
             " (llama.cpp's sequence ids), got " + std::to_string(options.max_batch_inputs);
    return nullptr;
  }
  const int trained = llama_model_n_ctx_train(model->model_);
  const int batch_tokens =
      options.max_batch_tokens > 0 ? options.max_batch_tokens : std::max(trained, 64);
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  llama_context_params params = llama_context_default_params();
  // A non-causal encoder must see each input whole in one ubatch, so a batch is one ubatch.
  // llama.cpp reserves its worst-case graph as n_seq_max sequences of n_ubatch / n_seq_max
  // tokens (integer division): a size that is no multiple of the inputs leaves tokens out of
  // the pooling's shapes and aborts (--max-batch-tokens 96 with 64 inputs did). The context is
  // rounded up to one; batches stay within batch_tokens.
  const int inputs = options.max_batch_inputs;
  const int context_tokens = (batch_tokens + inputs - 1) / inputs * inputs;
  params.n_ctx = static_cast<uint32_t>(context_tokens);
  params.n_batch = params.n_ubatch = static_cast<uint32_t>(context_tokens);
  params.n_seq_max = static_cast<uint32_t>(options.max_batch_inputs);
  params.kv_unified = true;  // a causal embedding model's inputs share the one cache
  params.n_threads = params.n_threads_batch = threads;
  params.embeddings = true;
  params.no_perf = true;
  model->context_ = llama_init_from_model(model->model_, params);
  if (model->context_ == nullptr) {
    *error = "could not create a llama.cpp context of " + std::to_string(batch_tokens) +
             " tokens and " + std::to_string(options.max_batch_inputs) +
             " inputs (out of memory? try a smaller --max-batch-tokens)";
    return nullptr;
  }
  if (llama_pooling_type(model->context_) == LLAMA_POOLING_TYPE_NONE) {
    *error = "the model '" + options.model_path +
             "' declares no pooling, so it makes no sentence embeddings";
    return nullptr;
  }
  model->threadpool_ = CpuThreadpool::attach(model->context_, threads, /*poll=*/50);
  model->ranks_ = llama_pooling_type(model->context_) == LLAMA_POOLING_TYPE_RANK;
  // A reranker's output is its classification head's: n_cls_out scores per input.
  model->dimensions_ = model->ranks_ ? static_cast<int>(llama_model_n_cls_out(model->model_))
                                     : llama_model_n_embd_out(model->model_);
  model->max_batch_tokens_ = batch_tokens;
  model->max_batch_inputs_ = options.max_batch_inputs;
  model->batch_ = std::make_unique<llama_batch>(llama_batch_init(batch_tokens, 0, 1));
  return model;
}

EmbeddingModel::~EmbeddingModel() {
  if (batch_) llama_batch_free(*batch_);
  if (context_) llama_free(context_);
  threadpool_.reset();
  if (model_) llama_model_free(model_);
}

TokenList EmbeddingModel::tokenize(std::string_view text) const {
  // No special-token parsing: a document that contains "[SEP]" is text, not a separator.
  return tokenize_text(vocab_, text, /*add_special=*/true, /*parse_special=*/false);
}

RerankPair EmbeddingModel::tokenize_pair(std::string_view query, std::string_view document,
                                         int max_document_tokens) const {
  TokenList document_tokens = tokenize_text(vocab_, document, false, false);
  std::string cut_document;
  if (max_document_tokens > 0 && document_tokens.size() > static_cast<size_t>(max_document_tokens)) {
    document_tokens.resize(static_cast<size_t>(max_document_tokens));
    cut_document = detokenize_text(vocab_, document_tokens);
    document = cut_document;
  }
  RerankPair pair;
  pair.document_tokens = static_cast<int>(document_tokens.size());
  if (const char* tmpl = llama_model_chat_template(model_, "rerank")) {
    // The template's text with {query} and {document} filled in, its special tokens parsed.
    std::string prompt = tmpl;
    for (const auto& [key, value] : {std::pair<std::string_view, std::string_view>{"{query}", query},
                                     {"{document}", document}}) {
      for (size_t at = prompt.find(key); at != std::string::npos;
           at = prompt.find(key, at + value.size())) {
        prompt.replace(at, key.size(), value);
      }
    }
    pair.tokens = tokenize_text(vocab_, prompt, false, true);
    return pair;
  }
  Token end = llama_vocab_eos(vocab_);
  if (end == LLAMA_TOKEN_NULL) end = llama_vocab_sep(vocab_);
  TokenList& out = pair.tokens;
  if (llama_vocab_get_add_bos(vocab_)) out.push_back(llama_vocab_bos(vocab_));
  const TokenList query_tokens = tokenize_text(vocab_, query, false, false);
  out.insert(out.end(), query_tokens.begin(), query_tokens.end());
  if (llama_vocab_get_add_eos(vocab_)) out.push_back(end);
  if (llama_vocab_get_add_sep(vocab_)) out.push_back(llama_vocab_sep(vocab_));
  out.insert(out.end(), document_tokens.begin(), document_tokens.end());
  if (llama_vocab_get_add_eos(vocab_)) out.push_back(end);
  return pair;
}

void EmbeddingModel::truncate(TokenList* tokens, int max_tokens) const {
  if (max_tokens < 1 || tokens->size() <= static_cast<size_t>(max_tokens)) return;
  const bool ends_in_separator = llama_vocab_get_add_sep(vocab_) || llama_vocab_get_add_eos(vocab_);
  const Token last = tokens->back();
  tokens->resize(static_cast<size_t>(max_tokens));
  if (ends_in_separator && max_tokens > 1) tokens->back() = last;
}

int EmbeddingModel::vocabulary_size() const { return llama_vocab_n_tokens(vocab_); }

int EmbeddingModel::max_input_tokens() const {
  const int trained = llama_model_n_ctx_train(model_);
  return trained > 0 ? std::min(trained, max_batch_tokens_) : max_batch_tokens_;
}

int EmbeddingModel::train_context_size() const { return llama_model_n_ctx_train(model_); }

std::string EmbeddingModel::pooling_name() const {
  switch (llama_pooling_type(context_)) {
    case LLAMA_POOLING_TYPE_MEAN:
      return "mean";
    case LLAMA_POOLING_TYPE_CLS:
      return "cls";
    case LLAMA_POOLING_TYPE_LAST:
      return "last";
    case LLAMA_POOLING_TYPE_RANK:
      return "rank";
    default:
      return "none";
  }
}

std::string EmbeddingModel::description() const {
  char buffer[256];
  const int32_t length = llama_model_desc(model_, buffer, sizeof(buffer));
  return std::string(buffer, static_cast<size_t>(std::max(length, 0)));
}

bool EmbeddingModel::embed(std::span<const TokenList* const> inputs, std::vector<float>* vectors,
                           std::string* error) {
  size_t tokens_in_all = 0;
  for (const TokenList* input : inputs) tokens_in_all += input->size();
  // llama.cpp asserts these; the batcher never builds such a batch, so this is a bug's message.
  if (tokens_in_all > static_cast<size_t>(max_batch_tokens_) ||
      inputs.size() > static_cast<size_t>(max_batch_inputs_) ||
      std::any_of(inputs.begin(), inputs.end(), [](const TokenList* t) { return t->empty(); })) {
    *error = "a batch of " + std::to_string(inputs.size()) + " inputs and " +
             std::to_string(tokens_in_all) + " tokens does not fit the model's batch";
    return false;
  }
  llama_batch& batch = *batch_;
  batch.n_tokens = 0;
  for (size_t sequence = 0; sequence < inputs.size(); ++sequence) {
    const TokenList& tokens = *inputs[sequence];
    for (size_t position = 0; position < tokens.size(); ++position) {
      const int index = batch.n_tokens++;
      batch.token[index] = tokens[position];
      batch.pos[index] = static_cast<llama_pos>(position);
      batch.n_seq_id[index] = 1;
      batch.seq_id[index][0] = static_cast<llama_seq_id>(sequence);
      batch.logits[index] = 1;  // llama.cpp pools over every token of an embedding batch
    }
  }
  // A causal embedding model keeps a cache; the last batch's inputs must not be seen.
  if (llama_memory_t memory = llama_get_memory(context_)) llama_memory_clear(memory, true);
  if (const int32_t status = llama_decode(context_, batch); status != 0) {
    *error = "llama.cpp could not compute the batch (status " + std::to_string(status) + ")";
    return false;
  }
  vectors->resize(inputs.size() * static_cast<size_t>(dimensions_));
  for (size_t sequence = 0; sequence < inputs.size(); ++sequence) {
    const float* pooled = llama_get_embeddings_seq(context_, static_cast<llama_seq_id>(sequence));
    if (pooled == nullptr) {
      *error = "llama.cpp returned no embedding for input " + std::to_string(sequence);
      return false;
    }
    float* out = vectors->data() + sequence * dimensions_;
    if (ranks_) {
      std::copy(pooled, pooled + dimensions_, out);  // scores, as llama-server returns them
    } else {
      normalize_into(pooled, dimensions_, out);
    }
  }
  return true;
}

}  // namespace brisk
