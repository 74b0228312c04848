#include "engine/scoring_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "engine/llama_backend.h"
#include "llama.h"
#ifdef BRISK_HAVE_LLAMA_EXT
#include "llama-ext.h"  // llama_get_memory_breakdown: staging API of the pinned source
#endif

namespace brisk {
namespace {

using SteadyClock = std::chrono::steady_clock;

double elapsed_ms(SteadyClock::time_point since) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - since).count();
}

Token argmax(const float* logits, int n_vocab) {
  return static_cast<Token>(std::max_element(logits, logits + n_vocab) - logits);
}

// One batch holding `count` tokens of one sequence, with logits wanted from `first_output` on.
class OwnedBatch {
 public:
  OwnedBatch(int capacity, int max_seqs) : batch_(llama_batch_init(capacity, 0, max_seqs)) {}
  ~OwnedBatch() { llama_batch_free(batch_); }
  OwnedBatch(const OwnedBatch&) = delete;
  OwnedBatch& operator=(const OwnedBatch&) = delete;
  void clear() { batch_.n_tokens = 0; }
  void add(Token token, int position, int sequence, bool want_logits) {
    const int index = batch_.n_tokens++;
    batch_.token[index] = token;
    batch_.pos[index] = position;
    batch_.n_seq_id[index] = 1;
    batch_.seq_id[index][0] = sequence;
    batch_.logits[index] = want_logits ? 1 : 0;
  }
  llama_batch& get() { return batch_; }

 private:
  llama_batch batch_;
};

}  // namespace

void ScoringModel::initialize_backend() { init_llama_backend_once(); }

std::unique_ptr<ScoringModel> ScoringModel::load(const ScoringModelOptions& options,
                                                 std::string* error) {
  init_llama_backend_once();
  std::unique_ptr<ScoringModel> scorer(new ScoringModel());
  const auto started = SteadyClock::now();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = options.gpu_layers;
  scorer->model_ = llama_model_load_from_file(options.model_path.c_str(), model_params);
  if (scorer->model_ == nullptr) {
    *error = "could not load model '" + options.model_path +
             "' (is it a complete GGUF file? run with --log-level debug for llama.cpp's reason)";
    return nullptr;
  }
  scorer->vocab_ = llama_model_get_vocab(scorer->model_);
  scorer->chat_template_ = ChatTemplate::choose(scorer->model_, "", "", error);
  if (!scorer->chat_template_) return nullptr;

  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  scorer->max_seqs_ = std::max(1, options.max_seqs);
  scorer->batch_tokens_ = std::max(options.ctx_size, scorer->max_seqs_);
  llama_context_params context_params = llama_context_default_params();
  context_params.n_ctx = static_cast<uint32_t>(options.ctx_size);
  // One decode call may carry a whole scored sequence; ggml splits it into micro-batches.
  context_params.n_batch = static_cast<uint32_t>(scorer->batch_tokens_);
  context_params.n_ubatch = static_cast<uint32_t>(std::min(scorer->batch_tokens_, 512));
  context_params.n_seq_max = static_cast<uint32_t>(scorer->max_seqs_);
  context_params.n_threads = threads;
  context_params.n_threads_batch = threads;
  context_params.kv_unified = true;
  context_params.no_perf = true;
  scorer->context_ = llama_init_from_model(scorer->model_, context_params);
  if (scorer->context_ == nullptr) {
    *error = "could not create a llama.cpp context of " + std::to_string(options.ctx_size) +
             " tokens for '" + options.model_path + "' (out of memory? try a smaller --ctx-size)";
    return nullptr;
  }
  scorer->context_size_ = static_cast<int>(llama_n_ctx(scorer->context_));
  scorer->load_ms_ = elapsed_ms(started);
  return scorer;
}

ScoringModel::~ScoringModel() {
  if (context_) llama_free(context_);
  if (model_) llama_model_free(model_);
}

uint64_t ScoringModel::weights_bytes() const { return llama_model_size(model_); }

AllocatedBytes ScoringModel::allocated_bytes() const {
  AllocatedBytes bytes;
#ifdef BRISK_HAVE_LLAMA_EXT
  for (const auto& [buffer_type, data] : llama_get_memory_breakdown(context_)) {
    bytes.model_bytes += data.model;
    bytes.context_bytes += data.context;
    bytes.compute_bytes += data.compute;
  }
#endif
  return bytes;
}

int ScoringModel::vocabulary_size() const { return llama_vocab_n_tokens(vocab_); }

std::string ScoringModel::description() const {
  char buffer[256];
  const int32_t length = llama_model_desc(model_, buffer, sizeof(buffer));
  return std::string(buffer, static_cast<size_t>(std::max(length, 0)));
}

uint64_t ScoringModel::vocabulary_fingerprint() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 1099511628211ull;
  };
  const int n_vocab = vocabulary_size();
  for (int token = 0; token < n_vocab; ++token) {
    const char* text = llama_vocab_get_text(vocab_, token);
    for (const char* c = text; c != nullptr && *c != '\0'; ++c) mix(static_cast<unsigned char>(*c));
    mix(0);
  }
  return hash;
}

TokenList ScoringModel::tokenize(std::string_view text, bool add_special,
                                 bool parse_special) const {
  return tokenize_text(vocab_, text, add_special, parse_special);
}

std::string ScoringModel::detokenize(const TokenList& tokens) const {
  std::string text(tokens.size() * 8 + 16, '\0');
  int32_t length = llama_detokenize(vocab_, tokens.data(), static_cast<int32_t>(tokens.size()),
                                    text.data(), static_cast<int32_t>(text.size()), true, false);
  if (length < 0) {
    text.resize(static_cast<size_t>(-length));
    length = llama_detokenize(vocab_, tokens.data(), static_cast<int32_t>(tokens.size()),
                              text.data(), static_cast<int32_t>(text.size()), true, false);
  }
  text.resize(static_cast<size_t>(std::max(length, 0)));
  return text;
}

bool ScoringModel::adds_bos() const { return llama_vocab_get_add_bos(vocab_); }

Token ScoringModel::bos() const { return llama_vocab_bos(vocab_); }

bool ScoringModel::apply_chat_template(const std::vector<ChatMessage>& messages,
                                       std::string* prompt, std::string* error) const {
  return chat_template_->apply(messages, prompt, error);
}

bool ScoringModel::decode_positions(const TokenList& tokens, int start, int end, int sequence,
                                    int first_output, std::vector<float>* logits,
                                    std::string* error) {
  const int n_vocab = vocabulary_size();
  OwnedBatch batch(batch_tokens_, max_seqs_);
  for (int chunk_start = start; chunk_start < end; chunk_start += batch_tokens_) {
    const int chunk_end = std::min(end, chunk_start + batch_tokens_);
    batch.clear();
    int outputs = 0;
    for (int position = chunk_start; position < chunk_end; ++position) {
      const bool want = logits != nullptr && position >= first_output;
      batch.add(tokens[static_cast<size_t>(position)], position, sequence, want);
      outputs += want ? 1 : 0;
    }
    if (llama_decode(context_, batch.get()) != 0) {
      *error = "llama_decode failed on a sequence of " + std::to_string(tokens.size()) +
               " tokens (context " + std::to_string(context_size_) + "; try a larger --ctx-size)";
      return false;
    }
    for (int output = 0; output < outputs; ++output) {
      const float* row = llama_get_logits_ith(context_, chunk_end - chunk_start - outputs + output);
      logits->insert(logits->end(), row, row + n_vocab);
    }
  }
  return true;
}

bool ScoringModel::score(const TokenList& tokens, int first_output, std::vector<float>* logits,
                         std::string* error) {
  const int length = static_cast<int>(tokens.size());
  if (length > context_size_) {
    *error = "a sequence of " + std::to_string(length) + " tokens does not fit the context of " +
             std::to_string(context_size_) + " (raise --ctx-size or shorten the input)";
    return false;
  }
  logits->clear();
  llama_memory_clear(llama_get_memory(context_), true);
  return decode_positions(tokens, 0, length, 0, first_output, logits, error);
}

std::optional<GreedyGeneration> ScoringModel::generate_greedy(const TokenList& prompt,
                                                              int max_tokens, std::string* error) {
  const int n_vocab = vocabulary_size();
  if (prompt.empty() || static_cast<int>(prompt.size()) + max_tokens > context_size_) {
    *error = "a prompt of " + std::to_string(prompt.size()) + " tokens plus " +
             std::to_string(max_tokens) + " new ones does not fit the context of " +
             std::to_string(context_size_) + " (raise --ctx-size or lower --max-tokens)";
    return std::nullopt;
  }
  GreedyGeneration generation;
  llama_memory_clear(llama_get_memory(context_), true);
  const auto started = SteadyClock::now();
  const int prompt_length = static_cast<int>(prompt.size());
  std::vector<float> last_logits;
  if (!decode_positions(prompt, 0, prompt_length, 0, prompt_length - 1, &last_logits, error)) {
    return std::nullopt;
  }
  Token next = argmax(last_logits.data(), n_vocab);
  generation.ttft_ms = elapsed_ms(started);
  OwnedBatch batch(1, 1);
  for (int produced = 0; produced < max_tokens; ++produced) {
    generation.tokens.push_back(next);
    if (llama_vocab_is_eog(vocab_, next)) {
      generation.ended = true;
      break;
    }
    if (produced + 1 == max_tokens) break;
    batch.clear();
    batch.add(next, prompt_length + produced, 0, true);
    if (llama_decode(context_, batch.get()) != 0) {
      *error = "llama_decode failed while generating";
      return std::nullopt;
    }
    next = argmax(llama_get_logits_ith(context_, 0), n_vocab);
  }
  generation.e2e_ms = elapsed_ms(started);
  return generation;
}

std::optional<double> ScoringModel::parallel_decode_tokens_per_s(const TokenList& prompt,
                                                                 int streams, int tokens_each,
                                                                 std::string* error) {
  const int prompt_length = static_cast<int>(prompt.size());
  if (streams < 1 || streams > max_seqs_ || prompt.empty() ||
      (prompt_length + tokens_each) * streams > context_size_) {
    *error = std::to_string(streams) + " streams of " + std::to_string(prompt_length) + " + " +
             std::to_string(tokens_each) + " tokens do not fit the context of " +
             std::to_string(context_size_);
    return std::nullopt;
  }
  const int n_vocab = vocabulary_size();
  llama_memory_clear(llama_get_memory(context_), true);
  std::vector<Token> next(static_cast<size_t>(streams));
  for (int stream = 0; stream < streams; ++stream) {
    std::vector<float> last;
    if (!decode_positions(prompt, 0, prompt_length, stream, prompt_length - 1, &last, error)) {
      return std::nullopt;
    }
    next[static_cast<size_t>(stream)] = argmax(last.data(), n_vocab);
  }
  OwnedBatch batch(streams, max_seqs_);
  const auto started = SteadyClock::now();
  // Every stream decodes `tokens_each` steps even past an end token: the figure is the speed of
  // a full batch, not of what a given prompt happens to produce.
  for (int step = 0; step < tokens_each; ++step) {
    batch.clear();
    for (int stream = 0; stream < streams; ++stream) {
      batch.add(next[static_cast<size_t>(stream)], prompt_length + step, stream, true);
    }
    if (llama_decode(context_, batch.get()) != 0) {
      *error = "llama_decode failed in the " + std::to_string(streams) + "-stream decode run";
      return std::nullopt;
    }
    for (int stream = 0; stream < streams; ++stream) {
      next[static_cast<size_t>(stream)] = argmax(llama_get_logits_ith(context_, stream), n_vocab);
    }
  }
  const double seconds = elapsed_ms(started) / 1000.0;
  return seconds > 0 ? static_cast<double>(streams) * tokens_each / seconds : 0.0;
}

}  // namespace brisk
