#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/token.h"

struct llama_model;
struct llama_context;
struct llama_vocab;

namespace brisk {

struct ScoringModelOptions {
  std::string model_path;
  int ctx_size = 4096;  // KV cells: the longest sequence scored, or all streams of a decode run
  int max_seqs = 1;     // sequences decoded side by side (the concurrency-N measurement)
  int threads = 0;      // 0 = all cores
  int gpu_layers = 0;
};

// A greedy continuation and how long it took.
struct GreedyGeneration {
  TokenList tokens;    // the continuation; its last token is the end-of-generation one if `ended`
  bool ended = false;  // the model chose to stop before the token limit
  double ttft_ms = 0;  // prompt prefill and the first token
  double e2e_ms = 0;   // the whole continuation
};

// What llama.cpp allocated for a model and its context, over all devices (zero when the
// linked llama.cpp cannot say: an installed one without the source's staging API).
struct AllocatedBytes {
  uint64_t model_bytes = 0;    // weights
  uint64_t context_bytes = 0;  // KV cache and other per-context state
  uint64_t compute_bytes = 0;  // graph compute buffers
  uint64_t total() const { return model_bytes + context_bytes + compute_bytes; }
};

// One model with a context of its own, for brisk quant: greedy generation, teacher-forced
// full-vocabulary logits, and the cost figures of the model (load time, weight bytes). It is
// separate from Engine (the server's runner) on purpose: a quality check wants one sequence, all
// logits and no scheduler, and two of these (reference and candidate) live side by side.
class ScoringModel {
 public:
  static std::unique_ptr<ScoringModel> load(const ScoringModelOptions& options, std::string* error);
  // llama.cpp's one-time process set-up (load() does it too): call it before a memory baseline
  // so that the first model loaded is not billed for it.
  static void initialize_backend();
  ~ScoringModel();
  ScoringModel(const ScoringModel&) = delete;
  ScoringModel& operator=(const ScoringModel&) = delete;

  // Model load plus context creation: what a server's cold start pays before its first request.
  double load_ms() const { return load_ms_; }
  uint64_t weights_bytes() const;
  AllocatedBytes allocated_bytes() const;
  int context_size() const { return context_size_; }
  int vocabulary_size() const;
  std::string description() const;
  // A hash of every token's text, id by id: two models agree on it only when a token id means
  // the same text in both, which teacher-forced comparison needs.
  uint64_t vocabulary_fingerprint() const;

  // `parse_special` false reads "<bos>" in the text as plain characters, as llama-perplexity does.
  TokenList tokenize(std::string_view text, bool add_special, bool parse_special) const;
  std::string detokenize(const TokenList& tokens) const;
  bool adds_bos() const;
  Token bos() const;
  bool apply_chat_template(const std::vector<ChatMessage>& messages, std::string* prompt,
                           std::string* error) const;

  // Argmax decoding from an empty KV cache, at most `max_tokens` new tokens.
  std::optional<GreedyGeneration> generate_greedy(const TokenList& prompt, int max_tokens,
                                                  std::string* error);
  // Feeds `tokens` (from an empty KV cache) and copies out the logits after each position from
  // `first_output` on: row r (vocabulary_size() floats) is the distribution of the token at
  // position first_output + r + 1.
  bool score(const TokenList& tokens, int first_output, std::vector<float>* logits,
             std::string* error);
  // Decode throughput with `streams` sequences (at most max_seqs) each generating `tokens_each`
  // greedy tokens after the same prompt: generated tokens per second of decode steps.
  std::optional<double> parallel_decode_tokens_per_s(const TokenList& prompt, int streams,
                                                     int tokens_each, std::string* error);

 private:
  ScoringModel() = default;
  bool decode_positions(const TokenList& tokens, int start, int end, int sequence, int first_output,
                        std::vector<float>* logits, std::string* error);

  llama_model* model_ = nullptr;
  llama_context* context_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::unique_ptr<ChatTemplate> chat_template_;
  int context_size_ = 0;
  int batch_tokens_ = 0;
  int max_seqs_ = 1;
  double load_ms_ = 0;
};

}  // namespace brisk
