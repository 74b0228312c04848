// Fuzzes the other model file `brisk plan --model` reads: a Hugging Face config.json
// (profile_from_hf_config). A config of any shape must give a profile or an error that says
// what is missing, never a crash or an uncaught exception.
#include <cstdlib>

#include "fuzz_input_file.h"
#include "plan/model_profile.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::FuzzInputFile file;
  std::string error;
  const auto profile = brisk::plan::profile_from_hf_config(file.hold(data, size), &error);
  if (!profile) {
    require(!error.empty());
    return 0;
  }
  require(profile->layers > 0 && profile->hidden_size > 0 && profile->attention_heads > 0 &&
          profile->kv_heads > 0 && profile->head_dim > 0 && profile->vocab_size > 0);
  require(profile->parameters > 0);
  return 0;
}
