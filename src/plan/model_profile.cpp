#include "plan/model_profile.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/json_file.h"
#include "common/json_nesting.h"
#include "common/model_store.h"
#include "engine/gguf_metadata.h"
#include "plan/embedded_data.h"

namespace brisk::plan {

double ModelProfile::layer_matmul_parameters() const {
  const double hidden = hidden_size;
  const double attention = 2.0 * hidden * attention_heads * head_dim +  // q and o
                           2.0 * hidden * kv_heads * head_dim;          // k and v
  const double mlp = 3.0 * hidden * intermediate_size;                  // gate, up, down
  return attention + mlp;
}

int ModelProfile::global_layers() const {
  if (sliding_window <= 0) return layers;
  if (global_layer_every <= 0) return 0;
  return layers / global_layer_every;
}

uint64_t ModelProfile::weight_bytes(const Precision& precision) const {
  if (stored_precision && stored_precision->name == precision.name && stored_weight_bytes > 0) {
    return stored_weight_bytes;
  }
  return static_cast<uint64_t>(parameters * precision.bytes_per_weight);
}

uint64_t ModelProfile::weight_bytes_read_per_step(const Precision& precision) const {
  uint64_t embedding = 0;
  if (!tied_embeddings) {
    const bool stored = stored_precision && stored_precision->name == precision.name;
    embedding = stored ? stored_embedding_bytes
                       : static_cast<uint64_t>(static_cast<double>(vocab_size) * hidden_size *
                                               precision.bytes_per_weight);
  }
  const uint64_t total = weight_bytes(precision);
  return total > embedding ? total - embedding : total;
}

double ModelProfile::kv_bytes(double tokens, double bytes_per_element) const {
  const double per_layer_token = 2.0 * kv_heads * head_dim * bytes_per_element;
  const double windowed_tokens = sliding_window > 0 ? std::min<double>(tokens, sliding_window) : 0;
  return per_layer_token * (global_layers() * tokens + windowed_layers() * windowed_tokens);
}

double ModelProfile::attention_flops_per_token(double context) const {
  const double windowed_context =
      sliding_window > 0 ? std::min<double>(context, sliding_window) : 0;
  // Scores (q.k) and the weighted sum of values: 2 FLOPs per multiply-add each.
  const double per_position = 4.0 * attention_heads * head_dim;
  return per_position * (global_layers() * context + windowed_layers() * windowed_context);
}

namespace {

// llama.cpp's LLAMA_FTYPE_MOSTLY_* names for the file types seen in practice.
std::string gguf_file_type_name(int file_type) {
  switch (file_type) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 7:
      return "Q8_0";
    case 10:
      return "Q2_K";
    case 12:
      return "Q3_K_M";
    case 14:
      return "Q4_K_S";
    case 15:
      return "Q4_K_M";
    case 16:
      return "Q5_K_S";
    case 17:
      return "Q5_K_M";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    default:
      return "";
  }
}

double shape_parameters(const ModelProfile& model) {
  const double embedding = static_cast<double>(model.vocab_size) * model.hidden_size;
  return model.layers * model.layer_matmul_parameters() +
         embedding * (model.tied_embeddings ? 1 : 2);
}

// Far beyond any real model, yet small enough that every size the planner derives from a shape
// (parameters x bytes, KV cells x bytes) stays a representable number: a model file is input
// from outside, and one that claims 2^40 layers must be refused, not computed with.
constexpr int kMaxDimension = 1 << 20;  // layers, hidden and MLP sizes, heads, head dim
constexpr int kMaxVocabulary = 1 << 24;
constexpr double kMaxParameters = 1e15;  // today's largest models have about 2e12

std::string check_shape(const ModelProfile& model) {
  const std::string which = "model '" + model.id + "' (" + model.origin + ")";
  if (model.layers <= 0 || model.hidden_size <= 0 || model.intermediate_size <= 0 ||
      model.attention_heads <= 0 || model.kv_heads <= 0 || model.head_dim <= 0 ||
      model.vocab_size <= 0) {
    return which +
           " lacks part of its shape: layers, hidden size, intermediate size, heads, KV heads, "
           "head dim and vocabulary must all be positive";
  }
  if (std::max({model.layers, model.hidden_size, model.intermediate_size, model.attention_heads,
                model.kv_heads, model.head_dim}) > kMaxDimension ||
      model.vocab_size > kMaxVocabulary) {
    return which +
           " has an implausible shape: layers, hidden size, intermediate size, heads, KV "
           "heads and head dim must be at most " +
           std::to_string(kMaxDimension) + ", the vocabulary at most " +
           std::to_string(kMaxVocabulary);
  }
  if (!(model.parameters <= kMaxParameters) || !(shape_parameters(model) <= kMaxParameters)) {
    return which + " claims more than 1e15 parameters: the file is damaged or not a model";
  }
  return {};
}

// A count read from a model file, when it is one: a whole number from 0 to INT_MAX. (Converting
// 1e300 or nan to int is undefined.) Otherwise `problem` says which key holds what.
std::optional<int> whole_count(double value, const std::string& key, std::string& problem) {
  if (std::isfinite(value) && value >= 0 && value <= std::numeric_limits<int>::max() &&
      value == std::floor(value)) {
    return static_cast<int>(value);
  }
  if (problem.empty()) {
    problem = fmt::format("'{}' is {}, not a whole number from 0 to {}", key, value,
                          std::numeric_limits<int>::max());
  }
  return std::nullopt;
}

}  // namespace

std::vector<ModelProfile> model_presets(std::string* error) {
  std::vector<ModelProfile> presets;
  toml::table root;
  try {
    root = toml::parse(embedded_models_toml(), std::string_view("data/models.toml"));
  } catch (const toml::parse_error& failure) {
    *error = std::string("data/models.toml: ") + std::string(failure.description());
    return presets;
  }
  const toml::array* entries = root["model"].as_array();
  if (entries == nullptr) return presets;
  for (const toml::node& node : *entries) {
    const toml::table& table = *node.as_table();
    ModelProfile model;
    model.id = table["id"].value_or(std::string());
    model.name = table["name"].value_or(model.id);
    model.architecture = table["architecture"].value_or(std::string());
    model.origin = "preset (" + table["source"].value_or(std::string("data/models.toml")) + ")";
    model.parameters = table["parameters"].value_or(0.0);
    model.layers = table["layers"].value_or(0);
    model.hidden_size = table["hidden_size"].value_or(0);
    model.intermediate_size = table["intermediate_size"].value_or(0);
    model.attention_heads = table["attention_heads"].value_or(0);
    model.kv_heads = table["kv_heads"].value_or(0);
    model.head_dim = table["head_dim"].value_or(0);
    model.vocab_size = table["vocab_size"].value_or(0);
    model.tied_embeddings = table["tied_embeddings"].value_or(false);
    model.max_context = table["max_context"].value_or(0);
    model.sliding_window = table["sliding_window"].value_or(0);
    model.global_layer_every = table["global_layer_every"].value_or(0);
    if (const std::string problem = check_shape(model); !problem.empty()) {
      *error = "data/models.toml: " + problem;
      return {};
    }
    if (model.parameters <= 0) model.parameters = shape_parameters(model);
    presets.push_back(std::move(model));
  }
  return presets;
}

std::optional<ModelProfile> profile_from_gguf(const std::string& path, std::string* error) {
  const auto metadata = read_gguf_metadata(path, error);
  if (!metadata) return std::nullopt;
  ModelProfile model;
  model.id = std::filesystem::path(path).stem().string();
  model.name =
      metadata->string("general.name").empty() ? model.id : metadata->string("general.name");
  model.architecture = metadata->string("general.architecture");
  model.origin = "GGUF metadata of " + path;
  model.gguf_path = path;
  std::string problem;  // the first key that holds no count
  auto arch_int = [&](const char* key, int fallback) {
    const auto value = metadata->arch_number(key);
    if (!value) return fallback;
    return whole_count(*value, model.architecture + "." + key, problem).value_or(fallback);
  };
  model.layers = arch_int("block_count", 0);
  model.hidden_size = arch_int("embedding_length", 0);
  model.intermediate_size = arch_int("feed_forward_length", 0);
  model.attention_heads = arch_int("attention.head_count", 0);
  model.kv_heads = arch_int("attention.head_count_kv", model.attention_heads);
  model.head_dim =
      arch_int("attention.key_length",
               model.attention_heads > 0 ? model.hidden_size / model.attention_heads : 0);
  const auto tokens = metadata->array_sizes.find("tokenizer.ggml.tokens");
  model.vocab_size =
      tokens != metadata->array_sizes.end()
          ? whole_count(double(tokens->second), "tokenizer.ggml.tokens", problem).value_or(0)
          : arch_int("vocab_size", 0);
  model.max_context = arch_int("context_length", 0);
  model.sliding_window = arch_int("attention.sliding_window", 0);
  // llama.cpp's Gemma 3 makes every sixth layer global (LLM_ARCH_GEMMA3's swa pattern).
  if (model.architecture == "gemma3" && model.sliding_window > 0) model.global_layer_every = 6;
  model.tied_embeddings = !metadata->bytes_by_tensor.contains("output.weight");
  model.pooling = metadata->arch_number("pooling_type").value_or(0) > 0;
  model.ranks = metadata->arch_number("pooling_type").value_or(0) == 4;  // LLAMA_POOLING_TYPE_RANK
  model.parameters = static_cast<double>(metadata->parameter_count);

  std::string dominant_type;
  uint64_t dominant_bytes = 0;
  for (const auto& [type, bytes] : metadata->bytes_by_type) {
    if (bytes > dominant_bytes) {
      dominant_type = type;
      dominant_bytes = bytes;
    }
  }
  model.stored_weight_bytes = metadata->tensor_bytes;
  model.stored_precision = precision_of_gguf_type(
      dominant_type, static_cast<double>(metadata->tensor_bytes) / model.parameters);
  if (const auto file_type = metadata->number("general.file_type")) {
    std::string ignored;  // an unknown file type only leaves the precision unnamed
    const std::string label =
        gguf_file_type_name(whole_count(*file_type, "", ignored).value_or(-1));
    if (!label.empty()) model.stored_precision->name = "gguf " + label;
  }
  const auto embedding = metadata->bytes_by_tensor.find("token_embd.weight");
  if (embedding != metadata->bytes_by_tensor.end())
    model.stored_embedding_bytes = embedding->second;
  if (!problem.empty()) {
    *error = "model '" + model.id + "' (" + model.origin + "): " + problem;
    return std::nullopt;
  }
  if (const std::string shape_problem = check_shape(model); !shape_problem.empty()) {
    *error = shape_problem;
    return std::nullopt;
  }
  return model;
}

std::optional<ModelProfile> profile_from_hf_config(const std::string& path, std::string* error) {
  auto document = read_json_file(path, *error);
  if (!document) return std::nullopt;
  nlohmann::json config = std::move(*document);
  // Its fields are copied below (text_config), and a copy recurses once per level.
  if (json_nesting_exceeds(config)) {
    *error = fmt::format("'{}' nests more than {} levels deep; it is no model config", path,
                         kMaxJsonNesting);
    return std::nullopt;
  }
  // Multimodal configs (Gemma 3 4B+) keep the language model under text_config.
  if (config.contains("text_config") && config["text_config"].is_object()) {
    nlohmann::json text = config["text_config"];
    for (const auto& [key, value] : config.items()) {
      if (!text.contains(key)) text[key] = value;
    }
    config = text;
  }
  // Each field's type is checked before it is read: json::value() and get<int>() throw on a
  // wrong type, and converting 1e300 to int is undefined.
  std::string problem;
  auto integer = [&](const char* key, int fallback) {
    const auto found = config.find(key);
    if (found == config.end() || found->is_null()) return fallback;
    if (!found->is_number()) {
      if (problem.empty()) problem = std::string("'") + key + "' must be a number";
      return fallback;
    }
    return whole_count(found->get<double>(), key, problem).value_or(fallback);
  };
  auto boolean = [&](const char* key, bool fallback) {
    const auto found = config.find(key);
    if (found == config.end() || found->is_null()) return fallback;
    if (!found->is_boolean()) {
      if (problem.empty()) problem = std::string("'") + key + "' must be true or false";
      return fallback;
    }
    return found->get<bool>();
  };
  ModelProfile model;
  model.id = std::filesystem::path(path).parent_path().filename().string();
  if (model.id.empty()) model.id = "config";
  model.name = model.id;
  if (const auto type = config.find("model_type"); type != config.end() && type->is_string()) {
    model.architecture = type->get<std::string>();
  }
  model.origin = "Hugging Face config " + path;
  model.layers = integer("num_hidden_layers", 0);
  model.hidden_size = integer("hidden_size", 0);
  model.intermediate_size = integer("intermediate_size", 0);
  model.attention_heads = integer("num_attention_heads", 0);
  model.kv_heads = integer("num_key_value_heads", model.attention_heads);
  model.head_dim = integer(
      "head_dim", model.attention_heads > 0 ? model.hidden_size / model.attention_heads : 0);
  model.vocab_size = integer("vocab_size", 0);
  model.max_context = integer("max_position_embeddings", 0);
  model.tied_embeddings = boolean("tie_word_embeddings", false);
  if (boolean("use_sliding_window", true)) {
    model.sliding_window = integer("sliding_window", 0);
    if (model.sliding_window > 0) model.global_layer_every = integer("sliding_window_pattern", 0);
  }
  if (!problem.empty()) {
    *error = "model '" + model.id + "' (" + model.origin + "): " + problem;
    return std::nullopt;
  }
  if (const std::string shape_problem = check_shape(model); !shape_problem.empty()) {
    *error = shape_problem;
    return std::nullopt;
  }
  model.parameters = shape_parameters(model);
  return model;
}

std::optional<ModelProfile> resolve_model_profile(const std::string& model_arg,
                                                  std::string* error) {
  const std::filesystem::path path(model_arg);
  if (std::filesystem::is_regular_file(path)) {
    if (path.extension() == ".json") return profile_from_hf_config(model_arg, error);
    return profile_from_gguf(model_arg, error);
  }
  if (model_arg.find('/') != std::string::npos || path.extension() == ".gguf" ||
      path.extension() == ".json") {
    *error = "model file '" + model_arg + "' does not exist";
    return std::nullopt;
  }
  // A model pulled into the local store is read exactly from its GGUF.
  const ResolveResult pulled = ModelStore::from_environment().resolve(model_arg);
  if (pulled.ok()) {
    auto profile = profile_from_gguf(pulled.path.string(), error);
    if (profile) profile->id = model_arg;
    return profile;
  }
  std::vector<ModelProfile> presets = model_presets(error);
  if (!error->empty()) return std::nullopt;
  std::string names;
  for (ModelProfile& preset : presets) {
    if (preset.id == model_arg) return std::move(preset);
    names += (names.empty() ? "" : ", ") + preset.id;
  }
  *error = "unknown model '" + model_arg +
           "': give a GGUF file, a Hugging Face config.json, or "
           "one of: " +
           names;
  return std::nullopt;
}

}  // namespace brisk::plan
