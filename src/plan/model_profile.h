#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/precision.h"

namespace brisk::plan {

// A transformer's shape, and the sizes that cost memory and time derived from it. Comes from a
// preset (data/models.toml), a GGUF file's metadata, or a Hugging Face config.json.
struct ModelProfile {
  std::string id;
  std::string name;
  std::string architecture;
  std::string origin;     // where the shape came from, for the report
  std::string gguf_path;  // the file, when the shape came from a GGUF (brisk plan --emit)
  double parameters = 0;  // total; computed from the shape when the source does not say
  int layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int attention_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  bool tied_embeddings = false;
  int max_context = 0;
  int sliding_window = 0;      // tokens; 0: every layer attends to the whole context
  int global_layer_every = 0;  // with a window: every Nth layer is global; 0: all use the window
  // An embedding model (its GGUF declares a pooling type): brisk serve runs it in the dynamic
  // batcher on /v1/embeddings, which plan's simulation does not model.
  bool pooling = false;
  bool ranks = false;  // its pooling is rank: a reranker, served on /v1/rerank

  // A GGUF knows its weights exactly; otherwise they follow from parameters x precision.
  std::optional<Precision> stored_precision;
  uint64_t stored_weight_bytes = 0;
  uint64_t stored_embedding_bytes = 0;  // token_embd when it is not also the output head

  // Weights of one layer's matrix products (attention q/k/v/o and a gated MLP).
  double layer_matmul_parameters() const;
  int global_layers() const;
  int windowed_layers() const { return layers - global_layers(); }

  uint64_t weight_bytes(const Precision& precision) const;
  // Bytes a decode step reads whatever the batch: every weight except an untied input
  // embedding table, of which each token reads one row.
  uint64_t weight_bytes_read_per_step(const Precision& precision) const;
  // K and V of one sequence holding `tokens` tokens, windowed layers capped at their window.
  double kv_bytes(double tokens, double bytes_per_element) const;
  // FLOPs of attention scores and values for one new token at position `context`.
  double attention_flops_per_token(double context) const;
};

// data/models.toml, compiled in: the named models `--model llama-3.1-8b` accepts.
std::vector<ModelProfile> model_presets(std::string* error);

// `--model` may name a preset, a GGUF file, or a Hugging Face config.json.
std::optional<ModelProfile> resolve_model_profile(const std::string& model_arg, std::string* error);
std::optional<ModelProfile> profile_from_gguf(const std::string& path, std::string* error);
std::optional<ModelProfile> profile_from_hf_config(const std::string& path, std::string* error);

}  // namespace brisk::plan
