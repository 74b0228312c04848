#include "doctor/probe_workloads.h"

#include "bench/openai_client.h"

namespace brisk::doctor {

std::unique_ptr<bench::SyntheticWorkload> make_synthetic(
    const bench::TargetEndpoint& target, const bench::TokenCalibration& calibration,
    const std::string& model, int input_tokens, int output_tokens, uint64_t seed,
    bench::ApiKind kind, int inputs_per_request) {
  bench::WorkloadOptions options;
  options.kind = kind;
  options.inputs_per_request = inputs_per_request;
  options.model = model;
  options.input_tokens = bench::LengthDistribution::fixed_at(input_tokens);
  options.output_tokens = bench::LengthDistribution::fixed_at(output_tokens);
  options.seed = seed;
  auto workload = std::make_unique<bench::SyntheticWorkload>(options, target, calibration);
  if (calibration.measured()) {
    workload->fit_prompt_length([&](const std::string& text) {
      return bench::count_tokens(target, calibration, text, /*add_special=*/true,
                                 std::chrono::seconds(10));
    });
  }
  return workload;
}

SharedPrefixWorkload::SharedPrefixWorkload(std::string route, std::string shared_prefix,
                                           std::unique_ptr<bench::SyntheticWorkload> tails,
                                           int output_tokens)
    : route_(std::move(route)), shared_prefix_(std::move(shared_prefix)), tails_(std::move(tails)),
      output_tokens_(output_tokens) {}

bench::CompletionRequest SharedPrefixWorkload::request(int run_index, int request_index) const {
  const auto& options = tails_->options();
  const std::string prompt = shared_prefix_ + "\n" + tails_->prompt(run_index, request_index);
  return {route_,
          bench::build_completion_body(bench::ApiKind::completions, options.model, prompt,
                                       output_tokens_, true, options.sampling),
          true};
}

MixedWorkload::MixedWorkload(std::unique_ptr<bench::Workload> shorts,
                             std::unique_ptr<bench::Workload> longs, int long_every)
    : shorts_(std::move(shorts)), longs_(std::move(longs)), long_every_(long_every) {}

bench::CompletionRequest MixedWorkload::request(int run_index, int request_index) const {
  return is_long(request_index) ? longs_->request(run_index, request_index)
                                : shorts_->request(run_index, request_index);
}

}  // namespace brisk::doctor
