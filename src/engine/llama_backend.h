#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/token.h"

struct llama_vocab;
struct llama_model_params;
typedef struct ggml_backend_device* ggml_backend_dev_t;
struct llama_context;
struct ggml_threadpool;

namespace brisk {

// Initialises llama.cpp's backends once per process and routes its log through spdlog (its
// per-tensor load chatter at debug level; warnings and errors at theirs).
void init_llama_backend_once();

// The memory of GPU `index` (0: the first) llama.cpp sees (bytes); nullopt in a CPU-only build
// or without one.
std::optional<uint64_t> gpu_memory_bytes(int index = 0);

// How a model's layers go to GPUs: `device` -1 lets llama.cpp spread them over every GPU it sees;
// N puts the whole model on GPU N (brisk serve --device). Set before llama_model_load_from_file.
class GpuPlacement {
 public:
  // False, with why, when there is no GPU N.
  bool apply(int device, llama_model_params& params, std::string* error);

 private:
  ggml_backend_dev_t devices_[2] = {nullptr, nullptr};  // params.devices points here
};

// A vocabulary's tokenizer, as every model in brisk uses it. `parse_special`: text such as
// "<start_of_turn>" becomes its special token, as llama-server does with templated prompts.
TokenList tokenize_text(const llama_vocab* vocab, std::string_view text, bool add_special,
                        bool parse_special);
std::string token_text(const llama_vocab* vocab, Token token);
// The text of `tokens` (special tokens left out), as llama_detokenize writes it.
std::string detokenize_text(const llama_vocab* vocab, const TokenList& tokens);

// A persistent pool of CPU worker threads attached to a context. Without one, ggml's CPU backend
// starts and joins fresh threads for every graph it computes; llama-server attaches one, so do
// we. Free the context before its pool.
class CpuThreadpool {
 public:
  // Null (and a warning) when the CPU backend offers no pools; ggml then starts threads per step.
  static std::unique_ptr<CpuThreadpool> attach(llama_context* context, int threads, int poll);
  ~CpuThreadpool();
  CpuThreadpool(const CpuThreadpool&) = delete;
  CpuThreadpool& operator=(const CpuThreadpool&) = delete;

 private:
  CpuThreadpool(ggml_threadpool* pool, void (*free_pool)(ggml_threadpool*))
      : pool_(pool), free_pool_(free_pool) {}
  ggml_threadpool* pool_;
  void (*free_pool_)(ggml_threadpool*);
};

}  // namespace brisk
