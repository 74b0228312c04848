// Fuzzes the GGUF metadata reader behind `brisk plan --model FILE` (read_gguf_metadata: ggml's
// gguf_init_from_file, then every key and tensor brisk reads). A malicious or broken model file
// must give an error, never a crash or an abort inside ggml.
#include <cstdlib>

#include "engine/gguf_metadata.h"
#include "fuzz_input_file.h"
#include "ggml.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

// ggml explains every refusal on stderr; at a million inputs that is most of the run's time.
void ignore_ggml_log(ggml_log_level, const char*, void*) {}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::FuzzInputFile file;
  static const bool quiet = (ggml_log_set(ignore_ggml_log, nullptr), true);
  (void)quiet;
  std::string error;
  const auto metadata = brisk::read_gguf_metadata(file.hold(data, size), &error);
  if (!metadata) {
    require(!error.empty());
    return 0;
  }
  // Fewer names than tensors is possible: ggml keeps names apart by their whole bytes but hands
  // them out as C strings, so "a\0x" and "a\0y" both read back as "a".
  require(metadata->bytes_by_tensor.size() <= metadata->tensor_count);
  uint64_t bytes = 0;
  for (const auto& [type, type_bytes] : metadata->bytes_by_type) bytes += type_bytes;
  require(bytes == metadata->tensor_bytes);
  return 0;
}
