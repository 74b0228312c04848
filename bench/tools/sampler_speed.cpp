// Time per sampled token over a Gemma-sized vocabulary (262,144 entries): brisk's Sampler
// against llama.cpp's sampler chain used the way llama-server uses it (a candidate array built
// from the logits, then the chain). Google Benchmark; results in BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
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
  float typical_p = 1.0f;
  float presence = 0.0f;
  float frequency = 0.0f;
  float repetition = 1.0f;
  int repetition_last_n = 64;
};

constexpr Setting kSettings[] = {
    {0.0f, 0, 1.0f, 0.0f},     // greedy
    {1.0f, 0, 1.0f, 0.0f},     // temperature 1, the full distribution (OpenAI's default)
    {0.8f, 40, 0.95f, 0.05f},  // llama-server's defaults
    {1.0f, 0, 0.95f, 0.0f},    // top-p alone over the whole vocabulary
    {1.0f, 0, 1.0f, 0.0f, 0.9f},   // typical-p alone over the whole vocabulary
    {0.8f, 40, 0.95f, 0.05f, 0.9f},  // llama-server's defaults and typical-p
    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.5f, 0.5f},  // the full distribution, OpenAI's penalties
    {0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 1.1f, 64},  // llama-server's, repeat_penalty
};
constexpr int kSettingCount = sizeof(kSettings) / sizeof(kSettings[0]);

// The tokens a penalized sequence has seen before the timed draws: a 512-token prompt.
constexpr int kPromptTokens = 512;

bool penalized(const Setting& s) {
  return s.presence != 0.0f || s.frequency != 0.0f || s.repetition != 1.0f;
}

void label(benchmark::State& state, const Setting& s) {
  std::string text = "t=" + std::to_string(s.temperature).substr(0, 3) +
                     " k=" + std::to_string(s.top_k) + " p=" + std::to_string(s.top_p).substr(0, 4) +
                     " min_p=" + std::to_string(s.min_p).substr(0, 4);
  if (s.typical_p < 1.0f) text += " typical=" + std::to_string(s.typical_p).substr(0, 3);
  if (s.presence != 0.0f) text += " presence=" + std::to_string(s.presence).substr(0, 3);
  if (s.frequency != 0.0f) text += " frequency=" + std::to_string(s.frequency).substr(0, 3);
  if (s.repetition != 1.0f) {
    text += " repeat=" + std::to_string(s.repetition).substr(0, 3) +
            " last_n=" + std::to_string(s.repetition_last_n);
  }
  state.SetLabel(text);
}

void brisk_sampler(benchmark::State& state) {
  const Setting& s = kSettings[state.range(0)];
  brisk::SamplingParams params;
  params.temperature = s.temperature;
  params.top_k = s.top_k;
  params.top_p = s.top_p;
  params.min_p = s.min_p;
  params.typical_p = s.typical_p;
  params.penalties = {s.presence, s.frequency, s.repetition, s.repetition_last_n};
  params.seed = 1;
  brisk::Sampler sampler(params);
  std::vector<brisk::Token> prompt(kPromptTokens);
  for (int i = 0; i < kPromptTokens; ++i) prompt[size_t(i)] = (i * 7919) % kVocabulary;
  sampler.add_prompt(prompt);
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
    if (penalized(s)) {
      llama_sampler_chain_add(chain, llama_sampler_init_penalties(kVocabulary, s.repetition_last_n,
                                                                  s.repetition, s.frequency,
                                                                  s.presence));
    }
    if (s.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(s.top_k));
    if (s.typical_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_typical(s.typical_p, 1));
    if (s.top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(s.top_p, 1));
    if (s.min_p > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(s.min_p, 1));
    llama_sampler_chain_add(chain, llama_sampler_init_temp(s.temperature));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(1));
  }
  for (int i = 0; i < kPromptTokens; ++i) llama_sampler_accept(chain, (i * 7919) % kVocabulary);
  std::vector<llama_token_data> candidates(kVocabulary);
  for (auto _ : state) {
    // What llama_sampler_sample does with a context's logits row.
    const float* row = logits().data();
    for (int i = 0; i < kVocabulary; ++i) candidates[i] = {i, row[i], 0.0f};
    llama_token_data_array array{candidates.data(), candidates.size(), -1, false};
    llama_sampler_apply(chain, &array);
    llama_sampler_accept(chain, array.data[array.selected].id);  // as llama-server does
    benchmark::DoNotOptimize(array.data[array.selected].id);
  }
  llama_sampler_free(chain);
  label(state, s);
}

}  // namespace

BENCHMARK(brisk_sampler)->DenseRange(0, kSettingCount - 1)->Unit(benchmark::kMicrosecond);
BENCHMARK(llama_chain)->DenseRange(0, kSettingCount - 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
