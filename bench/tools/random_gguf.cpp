// random-gguf: writes a GGUF file with a real Llama model's shape and random weights, so the
// speed of models too big to download can be measured (weight values do not change speed).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "ggml.h"
#include "gguf.h"
#include "llama_shape.h"
#include "random_gguf_writer.h"

#ifndef RANDOM_GGUF_DEFAULT_VOCAB
#define RANDOM_GGUF_DEFAULT_VOCAB ""
#endif

namespace random_gguf {
namespace {

struct GgufFree {
  void operator()(gguf_context* context) const { gguf_free(context); }
};
using GgufHandle = std::unique_ptr<gguf_context, GgufFree>;

struct CommandLine {
  std::string shape_name;
  std::optional<int64_t> layers, hidden, intermediate, heads, kv_heads, head_dim, vocab_size,
      context_tokens;
  std::optional<float> rope_theta;
  bool tied_flag = false;
  bool untied_flag = false;
  std::string type_name = "q4_k_m";
  std::string vocab_path = RANDOM_GGUF_DEFAULT_VOCAB;
  std::filesystem::path out_path;
  uint64_t seed = 0;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
};

WeightType parse_weight_type(const std::string& name) {
  if (name == "f16") return WeightType::kF16;
  if (name == "bf16") return WeightType::kBF16;
  if (name == "q8_0") return WeightType::kQ8_0;
  if (name == "q4_k_m") return WeightType::kQ4_K_M;
  throw std::invalid_argument("unknown --type " + name + "; choose f16, bf16, q8_0 or q4_k_m");
}

LlamaShape resolve_shape(const CommandLine& command_line) {
  LlamaShape shape;
  if (!command_line.shape_name.empty()) shape = *find_preset_shape(command_line.shape_name);
  auto apply = [](auto& field, const auto& override_value) {
    if (override_value) field = *override_value;
  };
  apply(shape.layers, command_line.layers);
  apply(shape.hidden, command_line.hidden);
  apply(shape.intermediate, command_line.intermediate);
  apply(shape.heads, command_line.heads);
  apply(shape.kv_heads, command_line.kv_heads);
  apply(shape.head_dim, command_line.head_dim);
  apply(shape.vocab_size, command_line.vocab_size);
  apply(shape.context_tokens, command_line.context_tokens);
  apply(shape.rope_theta, command_line.rope_theta);
  if (command_line.tied_flag) shape.tied_embeddings = true;
  if (command_line.untied_flag) shape.tied_embeddings = false;
  // Without a preset, the usual defaults: one KV head per head, and heads that split the hidden
  // size evenly.
  if (shape.kv_heads == 0) shape.kv_heads = shape.heads;
  if (shape.head_dim == 0 && shape.heads > 0) shape.head_dim = shape.hidden / shape.heads;
  return shape;
}

GgufHandle read_vocabulary(const std::string& vocab_path) {
  if (vocab_path.empty()) {
    throw std::invalid_argument("no vocabulary GGUF; pass --vocab FILE");
  }
  gguf_init_params params{};
  params.no_alloc = true;
  GgufHandle vocabulary(gguf_init_from_file(vocab_path.c_str(), params));
  if (!vocabulary) {
    throw std::invalid_argument("cannot read --vocab " + vocab_path +
                                " as a GGUF file; pass a GGUF with a tokenizer, e.g. llama.cpp's "
                                "models/ggml-vocab-llama-bpe.gguf");
  }
  return vocabulary;
}

int64_t vocabulary_token_count(const gguf_context* vocabulary, const std::string& vocab_path) {
  const int64_t tokens_key = gguf_find_key(vocabulary, "tokenizer.ggml.tokens");
  if (tokens_key < 0) {
    throw std::invalid_argument("--vocab " + vocab_path +
                                " has no tokenizer.ggml.tokens; pass a GGUF with a tokenizer");
  }
  return static_cast<int64_t>(gguf_get_arr_n(vocabulary, tokens_key));
}

// A vocabulary file may carry the hyperparameters of the model it came from (llama.*, or another
// architecture's keys); none of them describe the model written here.
void remove_model_keys(gguf_context* metadata) {
  for (int64_t key_id = gguf_get_n_kv(metadata) - 1; key_id >= 0; --key_id) {
    const std::string key = gguf_get_key(metadata, key_id);
    if (!key.starts_with("tokenizer.") && !key.starts_with("general.")) {
      gguf_remove_key(metadata, key.c_str());
    }
  }
}

// The vocabulary's key/values (tokenizer and general.*) first, then the model's hyperparameters,
// which override any the vocabulary file carried for its own model.
GgufHandle build_metadata(const gguf_context* vocabulary, const LlamaShape& shape,
                          WeightType weight_type, const std::string& model_name) {
  GgufHandle metadata(gguf_init_empty());
  gguf_context* m = metadata.get();
  gguf_set_kv(m, vocabulary);
  remove_model_keys(m);
  gguf_set_val_str(m, "general.architecture", "llama");
  gguf_set_val_str(m, "general.name", model_name.c_str());
  gguf_set_val_u32(m, "general.file_type", llama_file_type(weight_type));
  gguf_set_val_u32(m, "general.quantization_version", GGML_QNT_VERSION);
  gguf_set_val_u32(m, "llama.vocab_size", static_cast<uint32_t>(shape.vocab_size));
  gguf_set_val_u32(m, "llama.context_length", static_cast<uint32_t>(shape.context_tokens));
  gguf_set_val_u32(m, "llama.embedding_length", static_cast<uint32_t>(shape.hidden));
  gguf_set_val_u32(m, "llama.block_count", static_cast<uint32_t>(shape.layers));
  gguf_set_val_u32(m, "llama.feed_forward_length", static_cast<uint32_t>(shape.intermediate));
  gguf_set_val_u32(m, "llama.attention.head_count", static_cast<uint32_t>(shape.heads));
  gguf_set_val_u32(m, "llama.attention.head_count_kv", static_cast<uint32_t>(shape.kv_heads));
  gguf_set_val_u32(m, "llama.attention.key_length", static_cast<uint32_t>(shape.head_dim));
  gguf_set_val_u32(m, "llama.attention.value_length", static_cast<uint32_t>(shape.head_dim));
  gguf_set_val_u32(m, "llama.rope.dimension_count", static_cast<uint32_t>(shape.head_dim));
  gguf_set_val_f32(m, "llama.rope.freq_base", shape.rope_theta);
  gguf_set_val_f32(m, "llama.attention.layer_norm_rms_epsilon", shape.rms_norm_eps);
  return metadata;
}

void add_options(CLI::App& app, CommandLine& command_line) {
  app.add_option("--shape", command_line.shape_name,
                 "Preset model shape; other options override it")
      ->check(CLI::IsMember(preset_shape_names()));
  app.add_option("--layers", command_line.layers, "Transformer blocks");
  app.add_option("--hidden", command_line.hidden, "Embedding width");
  app.add_option("--intermediate", command_line.intermediate, "Feed-forward width");
  app.add_option("--heads", command_line.heads, "Attention (query) heads");
  app.add_option("--kv-heads", command_line.kv_heads, "Key/value heads (default: --heads)");
  app.add_option("--head-dim", command_line.head_dim, "Width of one head (default: hidden/heads)");
  app.add_option("--vocab-size", command_line.vocab_size,
                 "Tokens; must equal the --vocab file's token count");
  app.add_option("--context", command_line.context_tokens, "Trained context length in tokens");
  app.add_option("--rope-theta", command_line.rope_theta, "RoPE frequency base");
  // Two plain flags: CLI11 fills an optional<bool> flag even when it is absent.
  CLI::Option* tied = app.add_flag("--tied-embeddings", command_line.tied_flag,
                                   "Share token_embd as the output matrix (no output.weight)");
  app.add_flag("--untied-embeddings", command_line.untied_flag, "Write a separate output.weight")
      ->excludes(tied);
  app.add_option("--type", command_line.type_name,
                 "f16, bf16, q8_0 or q4_k_m (llama-quantize's Q4_K_M type choice per tensor)")
      ->capture_default_str();
  app.add_option("--vocab", command_line.vocab_path, "GGUF whose tokenizer key/values are copied")
      ->capture_default_str();
  app.add_option("--seed", command_line.seed, "Seed for the random weights")->capture_default_str();
  app.add_option("--threads", command_line.threads, "Threads that generate and quantize")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--out", command_line.out_path, "GGUF file to write")->required();
}

std::string describe(const LlamaShape& shape) {
  char text[256];
  std::snprintf(text, sizeof text,
                "%lld layers, hidden %lld, ff %lld, %lld heads / %lld kv heads x %lld, vocab %lld, "
                "context %lld, %s embeddings",
                static_cast<long long>(shape.layers), static_cast<long long>(shape.hidden),
                static_cast<long long>(shape.intermediate), static_cast<long long>(shape.heads),
                static_cast<long long>(shape.kv_heads), static_cast<long long>(shape.head_dim),
                static_cast<long long>(shape.vocab_size),
                static_cast<long long>(shape.context_tokens),
                shape.tied_embeddings ? "tied" : "untied");
  return text;
}

int run(const CommandLine& command_line) {
  const WeightType weight_type = parse_weight_type(command_line.type_name);
  const GgufHandle vocabulary = read_vocabulary(command_line.vocab_path);
  const int64_t vocabulary_tokens =
      vocabulary_token_count(vocabulary.get(), command_line.vocab_path);
  LlamaShape shape = resolve_shape(command_line);
  if (shape.vocab_size == 0) shape.vocab_size = vocabulary_tokens;
  if (shape.vocab_size != vocabulary_tokens) {
    throw std::invalid_argument("--vocab-size " + std::to_string(shape.vocab_size) +
                                " does not match the " + std::to_string(vocabulary_tokens) +
                                " tokens in " + command_line.vocab_path + "; pass --vocab-size " +
                                std::to_string(vocabulary_tokens) + " or a --vocab file with " +
                                std::to_string(shape.vocab_size) + " tokens");
  }
  validate_shape(shape);

  const std::string shape_label =
      command_line.shape_name.empty() ? std::string("custom") : command_line.shape_name;
  const std::string model_name = "random " + shape_label + " " + command_line.type_name;
  const GgufHandle metadata = build_metadata(vocabulary.get(), shape, weight_type, model_name);
  const auto tensors = plan_llama_tensors(shape, weight_type);
  std::printf("random-gguf: %s (%s), %zu tensors, seed %llu, %u threads -> %s\n",
              model_name.c_str(), describe(shape).c_str(), tensors.size(),
              static_cast<unsigned long long>(command_line.seed), command_line.threads,
              command_line.out_path.c_str());
  std::fflush(stdout);

  WriteOptions options;
  options.seed = command_line.seed;
  options.threads = command_line.threads;
  const WriteResult result =
      write_random_gguf(metadata.get(), tensors, shape, command_line.out_path, options);
  std::printf("wrote %s: %llu bytes (%.2f GB, %.2f GiB) in %.1f s\n", command_line.out_path.c_str(),
              static_cast<unsigned long long>(result.file_bytes),
              static_cast<double>(result.file_bytes) / 1e9,
              static_cast<double>(result.file_bytes) / (1024.0 * 1024.0 * 1024.0),
              result.elapsed_s);
  return 0;
}

}  // namespace
}  // namespace random_gguf

int main(int argc, char** argv) {
  CLI::App app{
      "random-gguf: write a GGUF with a real Llama model's shape and random weights, for speed "
      "measurements of models too big to download"};
  random_gguf::CommandLine command_line;
  random_gguf::add_options(app, command_line);
  CLI11_PARSE(app, argc, argv);
  try {
    return random_gguf::run(command_line);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "random-gguf: error: %s\n", error.what());
    return 1;
  }
}
