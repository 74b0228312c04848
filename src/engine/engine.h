#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/attention_calls.h"
#include "engine/chat_template.h"
#include "engine/grammar.h"
#include "engine/llama_backend.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/token.h"

struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_batch;

namespace brisk {

struct EngineOptions {
  std::string model_path;
  int ctx_size = 8192;           // KV cells shared by all sequences
  int max_seqs = 16;             // sequence ids in the context
  int max_batched_tokens = 512;  // tokens one decode step may carry
  int threads = 0;               // 0 = all cores
  int gpu_layers = 0;            // layers offloaded to the GPU (needs a CUDA build)
  int device = -1;               // -1: every GPU llama.cpp sees; N: all on GPU N (--device)
  bool swa_full = false;         // full-size sliding-window caches (more memory)
  // One KV buffer for all sequences (any request may use any share of ctx_size), or one per
  // sequence (each gets ctx_size / max_seqs; attention then reads only a sequence's own cells,
  // which is faster with many sequences). docs/cli.md, --kv-unified.
  bool kv_unified = true;
  // KV cache element types (llama-server's --cache-type-k/-v), by ggml's names: f16, bf16, f32,
  // q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl. q8_0 halves the cache's memory and the bytes attention
  // reads per step; a quantized V cache needs flash attention (llama.cpp turns it on where the
  // device has it, else the context is refused).
  // On the CPU with one KV buffer: a step's decodes go to llama_decode in calls of at most this
  // many rows, so ggml-cpu's flash attention reads each decode's own cells only
  // (engine/attention_calls.h; 0: one call per step). Unused on a GPU or per-sequence buffers.
  int cpu_attention_rows = kMaxPerRowAttentionRows;
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  int poll = 50;  // how long CPU worker threads spin for work between steps (0-100)
  // A llama.cpp built-in name (gemma, chatml, llama3, ...); empty: the GGUF's own, as Jinja.
  std::string chat_template;
  // A Jinja chat template to run instead of the GGUF's (llama-server's --chat-template-file).
  std::string chat_template_file;
};

// The KV cache element types EngineOptions::cache_type_k/v accept, for messages: "f16, bf16, ...".
std::string kv_cache_type_names();
bool is_kv_cache_type(const std::string& name);

// The only class that talks to llama.cpp. Tokenizer and template calls are safe from any
// thread (the vocabulary is read-only); batch and decode calls belong to the engine thread.
class Engine final : public ModelRunner {
 public:
  static std::unique_ptr<Engine> load(const EngineOptions& options, std::string* error);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  TokenList tokenize(std::string_view text, bool add_special) const;
  std::string token_piece(Token token) const override;
  bool is_end_of_generation(Token token) const override;
  // Renders messages with the model's chat template (see ChatTemplate).
  bool apply_chat_template(const std::vector<ChatMessage>& messages, std::string* prompt,
                           std::string* error) const;
  // With tools: the prompt, the tool-call grammar and stops, and the output's parser.
  bool render_chat(const std::vector<ChatMessage>& messages, const ChatTools* tools,
                   ChatPrompt* rendered, std::string* error) const;

  int context_size() const override { return context_size_; }
  // KV cells one sequence may use: the whole context when unified, else its share.
  int sequence_context_size() const override { return sequence_context_size_; }
  int sequence_ids() const override { return sequence_ids_; }
  int sliding_window_tokens() const override { return sliding_window_tokens_; }
  int train_context_size() const;
  int vocabulary_size() const override;
  // The longest prompt + completion one request may have.
  int max_request_tokens() const;
  std::string description() const;
  // Whether attention runs on a GPU (layers offloaded to a device that is there) or on the CPU.
  bool attention_on_gpu() const { return attention_on_gpu_; }
  // What the numbers of a request's tokens depend on besides the request (model file, llama.cpp
  // source, CPU features, devices, KV cache types and layout), in words: brisk serve's
  // system_fingerprint hashes it.
  const std::string& numerics_identity() const { return numerics_identity_; }
  // A request's output format as a constraint for its sampler, or null and `error` (any thread).
  std::shared_ptr<TokenConstraint> compile_grammar(const GrammarRequest& request,
                                                   std::string* error) const;
  const GrammarCompiler& grammars() const { return *grammars_; }
  // Where the chat template came from, for the startup log.
  const std::string& chat_template_origin() const { return chat_template_->origin(); }

  // Engine thread only.
  void clear_batch() override;
  int batch_size() const override;
  int add_to_batch(Token token, int position, int sequence, bool want_logits) override;
  DecodeStatus decode() override;
  // decode may return while a GPU still computes.
  void synchronize() override;
  const float* logits(int batch_index) override;
  SampledToken sample(Sampler& sampler, int batch_index, int top_logprobs = -1);
  void release_sequence(int sequence) override;
  void copy_sequence_prefix(int source, int destination, int tokens) override;
  void keep_sequence_prefix(int sequence, int tokens) override;
  int sequence_window_start(int sequence) const override;
  std::vector<uint8_t> save_sequence(int sequence) override;
  bool restore_sequence(int sequence, std::span<const uint8_t> state, int tokens) override;

 private:
  Engine() = default;
  // Rows [first, first + rows) of the batch in one llama_decode call.
  DecodeStatus decode_rows(int first, int rows);
  DecodeStatus decode_in_calls(const std::vector<AttentionCall>& calls);

  llama_model* model_ = nullptr;
  llama_context* context_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::unique_ptr<llama_batch> batch_;
  std::unique_ptr<CpuThreadpool> threadpool_;
  int batch_capacity_ = 0;
  // plan_attention_calls's max_rows (0: every batch in one call).
  int attention_rows_ = 0;
  bool attention_on_gpu_ = false;
  // The last decode's logits by batch row when it took several calls: the last call's stay in
  // llama.cpp's buffer, the others' are copied here.
  bool logits_by_row_ = false;
  std::vector<const float*> row_logits_;
  std::vector<float> copied_logits_;
  std::vector<int> row_sequences_;
  int context_size_ = 0;
  int sequence_context_size_ = 0;
  int sequence_ids_ = 0;
  int sliding_window_tokens_ = 0;
  std::string numerics_identity_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<GrammarCompiler> grammars_;
};

}  // namespace brisk
