#include "engine/llama_backend.h"

#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

namespace brisk {
namespace {

void forward_llama_log(ggml_log_level level, const char* text, void* /*user_data*/) {
  std::string_view line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.empty()) return;
  switch (level) {
    case GGML_LOG_LEVEL_ERROR:
      spdlog::error("llama.cpp: {}", line);
      break;
    case GGML_LOG_LEVEL_WARN:
      spdlog::warn("llama.cpp: {}", line);
      break;
    default:
      spdlog::debug("llama.cpp: {}", line);
  }
}

}  // namespace

void init_llama_backend_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(forward_llama_log, nullptr);
    llama_backend_init();
  });
}

namespace {

std::vector<ggml_backend_dev_t> gpus() {
  init_llama_backend_once();
  std::vector<ggml_backend_dev_t> out;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t device = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(device) == GGML_BACKEND_DEVICE_TYPE_GPU) out.push_back(device);
  }
  return out;
}

}  // namespace

std::optional<uint64_t> gpu_memory_bytes(int index) {
  const std::vector<ggml_backend_dev_t> found = gpus();
  if (index < 0 || static_cast<size_t>(index) >= found.size()) return std::nullopt;
  size_t free = 0;
  size_t total = 0;
  ggml_backend_dev_memory(found[static_cast<size_t>(index)], &free, &total);
  if (total == 0) return std::nullopt;
  return total;
}

bool GpuPlacement::apply(int device, llama_model_params& params, std::string* error) {
  if (device < 0) return true;
  const std::vector<ggml_backend_dev_t> found = gpus();
  if (static_cast<size_t>(device) >= found.size()) {
    std::string names;
    for (size_t i = 0; i < found.size(); ++i) {
      names += fmt::format("{}{}: {}", names.empty() ? "" : ", ", i,
                           ggml_backend_dev_description(found[i]));
    }
    *error = found.empty()
                 ? fmt::format("--device {}: no GPU is visible (a CPU-only build, or no GPU "
                               "on this machine); leave --device out",
                               device)
                 : fmt::format("--device {}: there are {} GPUs ({})", device, found.size(), names);
    return false;
  }
  devices_[0] = found[static_cast<size_t>(device)];
  devices_[1] = nullptr;
  params.devices = devices_;
  params.split_mode = LLAMA_SPLIT_MODE_NONE;
  params.main_gpu = 0;  // the first of `devices`
  return true;
}

TokenList tokenize_text(const llama_vocab* vocab, std::string_view text, bool add_special,
                        bool parse_special) {
  const int32_t length = static_cast<int32_t>(text.size());
  TokenList tokens(text.size() + 2);
  int32_t count = llama_tokenize(vocab, text.data(), length, tokens.data(),
                                 static_cast<int32_t>(tokens.size()), add_special, parse_special);
  if (count < 0) {
    tokens.resize(static_cast<size_t>(-count));
    count = llama_tokenize(vocab, text.data(), length, tokens.data(),
                           static_cast<int32_t>(tokens.size()), add_special, parse_special);
  }
  tokens.resize(static_cast<size_t>(std::max(count, 0)));
  return tokens;
}

std::string detokenize_text(const llama_vocab* vocab, const TokenList& tokens) {
  const int32_t count = static_cast<int32_t>(tokens.size());
  std::string text(tokens.size() * 8 + 16, '\0');
  int32_t length = llama_detokenize(vocab, tokens.data(), count, text.data(),
                                    static_cast<int32_t>(text.size()), false, false);
  if (length < 0) {
    text.resize(static_cast<size_t>(-length));
    length = llama_detokenize(vocab, tokens.data(), count, text.data(),
                              static_cast<int32_t>(text.size()), false, false);
  }
  text.resize(static_cast<size_t>(std::max(length, 0)));
  return text;
}

std::string token_text(const llama_vocab* vocab, Token token) {
  char buffer[256];
  int32_t length = llama_token_to_piece(vocab, token, buffer, sizeof(buffer), 0, false);
  if (length >= 0) return std::string(buffer, static_cast<size_t>(length));
  std::string piece(static_cast<size_t>(-length), '\0');
  length = llama_token_to_piece(vocab, token, piece.data(), -length, 0, false);
  piece.resize(static_cast<size_t>(std::max(length, 0)));
  return piece;
}

// The pool's functions come through the backend registry, as llama.cpp's common library does,
// so this works whether the CPU backend is linked in or loaded.
std::unique_ptr<CpuThreadpool> CpuThreadpool::attach(llama_context* context, int threads,
                                                     int poll) {
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (cpu == nullptr) return nullptr;
  ggml_backend_reg_t registry = ggml_backend_dev_backend_reg(cpu);
  using NewThreadpool = ggml_threadpool* (*)(ggml_threadpool_params*);
  auto new_pool = reinterpret_cast<NewThreadpool>(
      ggml_backend_reg_get_proc_address(registry, "ggml_threadpool_new"));
  auto free_pool = reinterpret_cast<void (*)(ggml_threadpool*)>(
      ggml_backend_reg_get_proc_address(registry, "ggml_threadpool_free"));
  if (new_pool == nullptr || free_pool == nullptr) return nullptr;
  ggml_threadpool_params params = ggml_threadpool_params_default(threads);
  params.poll = static_cast<uint32_t>(poll);
  ggml_threadpool* pool = new_pool(&params);
  if (pool == nullptr) {
    spdlog::warn(
        "could not create a CPU threadpool of {} threads; ggml will start threads per step",
        threads);
    return nullptr;
  }
  llama_attach_threadpool(context, pool, nullptr);
  return std::unique_ptr<CpuThreadpool>(new CpuThreadpool(pool, free_pool));
}

CpuThreadpool::~CpuThreadpool() { free_pool_(pool_); }

}  // namespace brisk
