// Time per sampled token over a Gemma-sized vocabulary (262,144 entries): brisk's Sampler
// against llama.cpp's sampler chain used the way llama-server uses it (a candidate array built
// from the logits, then the chain). Google Benchmark; results in BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"
#include "llama.h"

namespace {

constexpr int kVocabulary = 262144;

const std::vector<float>& logits() {
  static const std::vector<float> row = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> values(kVocabulary);
    for (float& value : values) value = normal(rng);
    return values;
  }();
  return row;
}

struct Setting {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

constexpr Setting kSettings[] = {
    {0.0f, 0, 1.0f, 0.0f},     // greedy
    {1.0f, 0, 1.0f, 0.0f},     // temperature 1, the full distribution (OpenAI's default)
    {0.8f, 40, 0.95f, 0.05f},  // llama-server's defaults
    {1.0f, 0, 0.95f, 0.0f},    // top-p alone over the whole vocabulary
};

void label(benchmark::State& state, const Setting& s) {
  state.SetLabel("t=" + std::to_string(s.temperature).substr(0, 3) +
                 " k=" + std::to_string(s.top_k) + " p=" + std::to_string(s.top_p).substr(0, 4) +
                 " min_p=" + std::to_string(s.min_p).substr(0, 4));
}

void brisk_sampler(benchmark::State& state) {
  const Setting& s = kSettings[state.range(0)];
  brisk::SamplingParams params;
  params.temperature = s.temperature;
  params.top_k = s.top_k;
  params.top_p = s.top_p;
  params.min_p = s.min_p;
  params.seed = 1;
  brisk::Sampler sampler(params);
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.sample(logits().data(), kVocabulary).token);
  }
  label(state, s);
}

void llama_chain(benchmark::State& state) {
  const Setting& s = kSettings[state.range(0)];
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (s.temperature <= 0.0f) {
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
  } else {
    if (s.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(s.top_k));
    if (s.top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(s.top_p, 1));
    if (s.min_p > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(s.min_p, 1));
    llama_sampler_chain_add(chain, llama_sampler_init_temp(s.temperature));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(1));
  }
  std::vector<llama_token_data> candidates(kVocabulary);
  for (auto _ : state) {
    // What llama_sampler_sample does with a context's logits row.
    const float* row = logits().data();
    for (int i = 0; i < kVocabulary; ++i) candidates[i] = {i, row[i], 0.0f};
    llama_token_data_array array{candidates.data(), candidates.size(), -1, false};
    llama_sampler_apply(chain, &array);
    benchmark::DoNotOptimize(array.data[array.selected].id);
  }
  llama_sampler_free(chain);
  label(state, s);
}

}  // namespace

BENCHMARK(brisk_sampler)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(llama_chain)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
