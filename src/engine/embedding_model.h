#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/embedding_runner.h"

#include "engine/llama_backend.h"

struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_batch;

namespace brisk {

struct EmbeddingModelOptions {
  std::string model_path;
  // Tokens of all inputs in one batch (one llama.cpp ubatch); 0: the model's training context.
  // llama.cpp attends over a whole batch at once (masked), so attention grows with the square
  // of a batch's tokens: 4096-token batches ran 1.8x slower per vector than 512 (BENCHMARKS.md).
  int max_batch_tokens = 0;
  int max_batch_inputs = 64;    // inputs in one batch (llama.cpp sequence ids, at most 256)
  int threads = 0;              // 0 = all cores
  int gpu_layers = 0;
  int device = -1;  // -1: every GPU llama.cpp sees; N: all on GPU N (--device)
};

// What the GGUF at `path` declares of pooling. none: a generative model (the completion routes).
// Otherwise a pooling model (BERT-style sentence encoders, rerankers, embedding LLMs) that brisk
// serves through the dynamic batcher: embedding on /v1/embeddings; rank, a reranker (a
// classification head scores a query and a document read together), on /v1/rerank.
enum class FilePooling { none, embedding, rank };
FilePooling pooling_of_model_file(const std::string& path);

// A query and a document as a reranker reads them, tokenized.
struct RerankPair {
  TokenList tokens;
  int document_tokens = 0;  // of `tokens`, the document's own
};

// A sentence-embedding model or a reranker on llama.cpp: pooling and causality come from the
// GGUF, as llama-server reads them. Tokenizing is safe from any thread; embed() belongs to one
// thread.
class EmbeddingModel final : public EmbeddingRunner {
 public:
  static std::unique_ptr<EmbeddingModel> load(const EmbeddingModelOptions& options,
                                              std::string* error);
  ~EmbeddingModel() override;
  EmbeddingModel(const EmbeddingModel&) = delete;
  EmbeddingModel& operator=(const EmbeddingModel&) = delete;

  // With the model's own special tokens (e.g. [CLS] ... [SEP]), as llama-server embeds.
  TokenList tokenize(std::string_view text) const;
  // Cuts a tokenized text to `max_tokens`, keeping the separator the tokenizer appends (BERT's
  // [SEP]), as TEI's truncate does.
  void truncate(TokenList* tokens, int max_tokens) const;
  int vocabulary_size() const;
  // The longest input: the model's trained context, within one batch.
  int max_input_tokens() const;
  int train_context_size() const;
  // "mean", "cls", "last" or "rank".
  std::string pooling_name() const;
  // A reranker: embed() gives each input its head's raw scores (its first is the relevance),
  // not a normalized vector.
  bool ranks() const { return ranks_; }
  // A query and a document in the reranker's input format, as llama-server builds it: the
  // GGUF's "rerank" template if it has one, else [BOS] query [EOS] [SEP] document [EOS] with
  // the special tokens the vocabulary adds. `max_document_tokens` > 0 cuts the document to that
  // many tokens first.
  RerankPair tokenize_pair(std::string_view query, std::string_view document,
                           int max_document_tokens = 0) const;
  std::string description() const;

  int dimensions() const override { return dimensions_; }
  int max_batch_tokens() const override { return max_batch_tokens_; }
  int max_batch_inputs() const override { return max_batch_inputs_; }
  bool embed(std::span<const TokenList* const> inputs, std::vector<float>* vectors,
             std::string* error) override;

 private:
  EmbeddingModel() = default;

  llama_model* model_ = nullptr;
  llama_context* context_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::unique_ptr<CpuThreadpool> threadpool_;
  std::unique_ptr<llama_batch> batch_;
  int dimensions_ = 0;
  bool ranks_ = false;
  int max_batch_tokens_ = 0;
  int max_batch_inputs_ = 0;
};

}  // namespace brisk
