// What admission's forecast of a newcomer's wait costs (sched/wait_forecast.h): brisk serve's
// scheduler run from a live state to the newcomer's first token, or to the horizon of
// --max-queue-delay-ms. The states are a cold burst's on a 2-vCPU Gemma 3 270M server (the
// costs its warm-up measured): every sequence busy, and N requests of ~250 prompt tokens
// waiting, each asking `max_tokens` (0: none named). Google Benchmark; results in BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include "sched/wait_forecast.h"

namespace {

brisk::StepCostTable gemma_on_two_vcpus() {
  brisk::StepCostTable table;
  table.decode_ms_by_batch = {{1, 20.0}, {16, 70.0}};
  table.prefill_ms_per_token = 1.4;
  table.row_cell_ms = 0.25e-3;
  return table;
}

void Forecast(benchmark::State& state) {
  const int waiting = static_cast<int>(state.range(0));
  const int max_tokens = static_cast<int>(state.range(1));
  brisk::WaitForecastOptions options;
  options.scheduler.max_seqs = 16;
  options.scheduler.max_batched_tokens = 512;
  options.kv_cells = 16384;
  brisk::LiveLoad load;
  load.costs = gemma_on_two_vcpus();
  load.costs_settled = true;
  for (int i = 0; i < 16; ++i) {
    brisk::ForecastRequest running;
    running.held_cells = 250 + i;
    running.output_tokens = max_tokens > 0 ? max_tokens - i : 0;
    load.running.push_back(running);
  }
  std::vector<brisk::ForecastRequest> submitted;
  for (int i = 0; i < waiting; ++i) {
    brisk::ForecastRequest request;
    request.prompt_tokens = 150 + (i * 37) % 200;
    request.output_tokens = max_tokens;
    submitted.push_back(request);
  }
  brisk::Newcomer newcomer;
  newcomer.prompt_tokens = 250;
  newcomer.max_tokens = max_tokens;
  double wait = 0;
  for (auto _ : state) {
    wait = brisk::forecast_waits(options, load, submitted, newcomer, 30000).newcomer_ms;
    benchmark::DoNotOptimize(wait);
  }
  state.counters["wait_ms"] = wait;
}

}  // namespace

BENCHMARK(Forecast)
    ->ArgNames({"waiting", "max_tokens"})
    ->Args({0, 16})
    ->Args({16, 16})
    ->Args({64, 16})
    ->Args({134, 16})
    ->Args({16, 128})
    ->Args({64, 128})
    ->Args({134, 128})
    ->Args({64, 0})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
