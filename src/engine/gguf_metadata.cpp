#include "engine/gguf_metadata.h"

#include <filesystem>
#include <memory>

#include "ggml.h"
#include "gguf.h"

namespace brisk {

std::optional<double> GgufMetadata::number(const std::string& key) const {
  const auto found = numbers.find(key);
  if (found == numbers.end()) return std::nullopt;
  return found->second;
}

std::string GgufMetadata::string(const std::string& key) const {
  const auto found = strings.find(key);
  return found == strings.end() ? std::string() : found->second;
}

std::optional<double> GgufMetadata::arch_number(const std::string& suffix) const {
  return number(string("general.architecture") + "." + suffix);
}

namespace {

std::optional<double> scalar_value(const gguf_context* context, int64_t key) {
  switch (gguf_get_kv_type(context, key)) {
    case GGUF_TYPE_UINT8:
      return gguf_get_val_u8(context, key);
    case GGUF_TYPE_INT8:
      return gguf_get_val_i8(context, key);
    case GGUF_TYPE_UINT16:
      return gguf_get_val_u16(context, key);
    case GGUF_TYPE_INT16:
      return gguf_get_val_i16(context, key);
    case GGUF_TYPE_UINT32:
      return gguf_get_val_u32(context, key);
    case GGUF_TYPE_INT32:
      return gguf_get_val_i32(context, key);
    case GGUF_TYPE_UINT64:
      return static_cast<double>(gguf_get_val_u64(context, key));
    case GGUF_TYPE_INT64:
      return static_cast<double>(gguf_get_val_i64(context, key));
    case GGUF_TYPE_FLOAT32:
      return gguf_get_val_f32(context, key);
    case GGUF_TYPE_FLOAT64:
      return gguf_get_val_f64(context, key);
    case GGUF_TYPE_BOOL:
      return gguf_get_val_bool(context, key) ? 1.0 : 0.0;
    default:
      return std::nullopt;
  }
}

struct GgufFree {
  void operator()(gguf_context* context) const { gguf_free(context); }
};

}  // namespace

std::optional<GgufMetadata> read_gguf_metadata(const std::string& path, std::string* error) {
  if (!std::filesystem::is_regular_file(path)) {
    *error = "model file '" + path + "' does not exist (give a GGUF path or a preset name)";
    return std::nullopt;
  }
  gguf_init_params params{};
  params.no_alloc = true;
  params.ctx = nullptr;
  std::unique_ptr<gguf_context, GgufFree> context(gguf_init_from_file(path.c_str(), params));
  if (!context) {
    *error = "'" + path + "' is not a readable GGUF file";
    return std::nullopt;
  }
  GgufMetadata metadata;
  const gguf_context* raw = context.get();
  for (int64_t key = 0; key < gguf_get_n_kv(raw); ++key) {
    const std::string name = gguf_get_key(raw, key);
    const gguf_type type = gguf_get_kv_type(raw, key);
    if (type == GGUF_TYPE_STRING) {
      metadata.strings[name] = gguf_get_val_str(raw, key);
    } else if (type == GGUF_TYPE_ARRAY) {
      metadata.array_sizes[name] = gguf_get_arr_n(raw, key);
    } else if (const auto value = scalar_value(raw, key)) {
      metadata.numbers[name] = *value;
    }
  }
  metadata.tensor_count = static_cast<uint64_t>(gguf_get_n_tensors(raw));
  for (int64_t tensor = 0; tensor < gguf_get_n_tensors(raw); ++tensor) {
    const uint64_t bytes = gguf_get_tensor_size(raw, tensor);
    const int64_t* shape = gguf_get_tensor_ne(raw, tensor);
    uint64_t elements = 1;
    for (int dim = 0; dim < GGML_MAX_DIMS; ++dim) elements *= static_cast<uint64_t>(shape[dim]);
    metadata.tensor_bytes += bytes;
    metadata.parameter_count += elements;
    metadata.bytes_by_type[ggml_type_name(gguf_get_tensor_type(raw, tensor))] += bytes;
    metadata.bytes_by_tensor[gguf_get_tensor_name(raw, tensor)] = bytes;
  }
  return metadata;
}

}  // namespace brisk
