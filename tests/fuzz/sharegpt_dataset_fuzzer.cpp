// Fuzzes brisk bench's --dataset reader for ShareGPT files (load_sharegpt_dataset), with
// vLLM's limits and the 4-characters-a-token estimate that is used when the server cannot
// tokenize. Every conversation it takes must satisfy the limits it was given.
#include <cstdlib>

#include "bench/dataset_workload.h"
#include "fuzz_input_file.h"

namespace {

using namespace brisk::bench;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::FuzzInputFile file;
  const ShareGptLimits limits;
  const auto no_tokenizer = [](const std::string&) -> std::optional<int> { return std::nullopt; };
  std::string error;
  const auto entries = load_sharegpt_dataset(file.hold(data, size), /*wanted=*/8, /*seed=*/7,
                                             limits, no_tokenizer, error);
  if (!entries) {
    require(!error.empty());
    return 0;
  }
  require(!entries->empty() && entries->size() <= 8);
  for (const DatasetEntry& entry : *entries) {
    require(!entry.has_messages() && !entry.prompt.empty());
    require(entry.output_tokens && *entry.output_tokens >= limits.min_tokens);
  }
  return 0;
}
