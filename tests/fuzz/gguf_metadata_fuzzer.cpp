// Fuzzes what brisk reads from a model file: the GGUF metadata reader (read_gguf_metadata, on
// ggml's gguf_init_from_file) and the model shape `brisk plan --model FILE` derives from it
// (profile_from_gguf). A malicious or broken model file must give an error, never a crash or an
// abort inside ggml, and a shape it accepts must be one the planner can compute with.
#include <cstdlib>

#include "engine/gguf_metadata.h"
#include "fuzz_input_file.h"
#include "ggml.h"
#include "plan/model_profile.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

// ggml explains every refusal on stderr; at a million inputs that is most of the run's time.
void ignore_ggml_log(ggml_log_level, const char*, void*) {}

void check_metadata(const brisk::GgufMetadata& metadata) {
  // Fewer names than tensors is possible: ggml keeps names apart by their whole bytes but hands
  // them out as C strings, so "a\0x" and "a\0y" both read back as "a".
  require(metadata.bytes_by_tensor.size() <= metadata.tensor_count);
  uint64_t bytes = 0;
  for (const auto& [type, type_bytes] : metadata.bytes_by_type) bytes += type_bytes;
  require(bytes == metadata.tensor_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::FuzzInputFile file;
  static const bool quiet = (ggml_log_set(ignore_ggml_log, nullptr), true);
  (void)quiet;
  const std::string& path = file.hold(data, size);
  std::string error;
  const auto metadata = brisk::read_gguf_metadata(path, &error);
  if (!metadata) {
    require(!error.empty());
    return 0;
  }
  check_metadata(*metadata);

  error.clear();
  const auto profile = brisk::plan::profile_from_gguf(path, &error);
  if (!profile) {
    require(!error.empty());
    return 0;
  }
  require(profile->layers > 0 && profile->hidden_size > 0 && profile->attention_heads > 0 &&
          profile->kv_heads > 0 && profile->head_dim > 0 && profile->vocab_size > 0);
  return 0;
}
