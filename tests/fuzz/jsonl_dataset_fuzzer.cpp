// Fuzzes brisk bench's --dataset reader for JSONL test sets (load_jsonl_dataset), then builds the
// request body of every entry it accepts (DatasetWorkload::request), as a run does. A malformed
// file must be refused with a message that names the line, never crash the benchmark.
#include <cstdlib>

#include "bench/dataset_workload.h"
#include "fuzz_input_file.h"

namespace {

using namespace brisk::bench;

void require(bool condition) {
  if (!condition) std::abort();
}

void build_every_request(std::vector<DatasetEntry> entries, ApiKind kind) {
  const size_t count = entries.size();
  TargetEndpoint target;
  target.host = "127.0.0.1";
  const DatasetWorkload workload(std::move(entries), kind, "model", target,
                                 LengthDistribution::fixed_at(16), std::nullopt, /*seed=*/1,
                                 /*stream=*/true, SamplingOptions{});
  for (size_t i = 0; i < count; ++i) {
    const CompletionRequest request = workload.request(0, static_cast<int>(i));
    require(!request.body.empty() && !request.route.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::FuzzInputFile file;
  std::string error;
  auto entries = load_jsonl_dataset(file.hold(data, size), error);
  if (!entries) {
    require(!error.empty());
    return 0;
  }
  require(!entries->empty());
  for (const DatasetEntry& entry : *entries) {
    require(!entry.output_tokens || *entry.output_tokens > 0);
  }
  build_every_request(*entries, ApiKind::chat);
  build_every_request(std::move(*entries), ApiKind::completions);
  return 0;
}
