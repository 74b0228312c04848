#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace brisk {

// What a GGUF file says about its model without loading any weights: the header's key/values
// (numbers and strings; arrays only by length) and the size of every tensor by type.
struct GgufMetadata {
  std::map<std::string, double> numbers;        // every integer, float and bool key
  std::map<std::string, std::string> strings;   // every string key
  std::map<std::string, uint64_t> array_sizes;  // every array key, by element count
  uint64_t tensor_count = 0;
  uint64_t tensor_bytes = 0;                        // all tensors, as stored
  uint64_t parameter_count = 0;                     // elements of all tensors
  std::map<std::string, uint64_t> bytes_by_type;    // e.g. "q4_K" -> bytes
  std::map<std::string, uint64_t> bytes_by_tensor;  // every tensor by name

  std::optional<double> number(const std::string& key) const;
  std::string string(const std::string& key) const;  // "" when absent
  // The architecture's own key, e.g. arch_number("block_count") reads "llama.block_count".
  std::optional<double> arch_number(const std::string& suffix) const;
};

// Reads only the header (tensor data stays on disk). Returns nullopt and sets `error` when the
// file is missing or not a GGUF.
std::optional<GgufMetadata> read_gguf_metadata(const std::string& path, std::string* error);

}  // namespace brisk
