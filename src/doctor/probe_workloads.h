#pragma once

#include <memory>

#include "bench/workload.h"

namespace brisk::doctor {

// Synthetic prompts of `input_tokens` asking for `output_tokens`, sized with the target's
// /tokenize when it has one (brisk bench's own workload: each prompt unique, so no cache helps).
// For `embeddings`, requests of `inputs_per_request` such texts.
std::unique_ptr<bench::SyntheticWorkload> make_synthetic(
    const bench::TargetEndpoint& target, const bench::TokenCalibration& calibration,
    const std::string& model, int input_tokens, int output_tokens, uint64_t seed,
    bench::ApiKind kind = bench::ApiKind::completions, int inputs_per_request = 1);

// Every prompt starts with the same `shared` text (a long system prompt) and ends with a short
// unique question: what a prefix cache is for.
class SharedPrefixWorkload : public bench::Workload {
 public:
  SharedPrefixWorkload(std::string route, std::string shared_prefix,
                       std::unique_ptr<bench::SyntheticWorkload> tails, int output_tokens);
  bench::CompletionRequest request(int run_index, int request_index) const override;
  bench::ApiKind kind() const override { return bench::ApiKind::completions; }

 private:
  std::string route_;
  std::string shared_prefix_;
  std::unique_ptr<bench::SyntheticWorkload> tails_;
  int output_tokens_;
};

// Request i is a long prompt when i % `long_every` == 0, otherwise a short one: long prompts
// arriving among short streams.
class MixedWorkload : public bench::Workload {
 public:
  MixedWorkload(std::unique_ptr<bench::Workload> shorts, std::unique_ptr<bench::Workload> longs,
                int long_every);
  bench::CompletionRequest request(int run_index, int request_index) const override;
  bench::ApiKind kind() const override { return bench::ApiKind::completions; }
  bool is_long(int request_index) const { return request_index % long_every_ == 0; }

 private:
  std::unique_ptr<bench::Workload> shorts_;
  std::unique_ptr<bench::Workload> longs_;
  int long_every_;
};

}  // namespace brisk::doctor
