// A new server's warm-up (sched/cost_warmup.h) on a fake model whose steps take known times, and
// what it buys: a cold burst's admissions priced from the first request on.

#include "sched/cost_warmup.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "fake_model_runner.h"
#include "scheduler_run.h"
#include "sched/engine_loop.h"

namespace brisk {
namespace {

using testing::FakeModelRunner;
using namespace std::chrono_literals;

TEST(CostWarmup, TeachesTheStepCostsAndLeavesTheCacheEmpty) {
  FakeModelRunner runner(4096);
  runner.step_delay = 4ms;   // a step's fixed cost
  runner.token_delay = 1ms;  // and one per token of its batch
  StepCosts costs(150, 512);
  const WarmupResult result = warm_up_step_costs(runner, costs, 8, 64);
  ASSERT_TRUE(result.ok);
  EXPECT_TRUE(costs.decode_cost_settled()) << "the first, slow step was left out";
  EXPECT_EQ(runner.cells_in_use(), 0) << "the warm-up's cells are freed";
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_EQ(runner.max_sequences_in_a_step(), 8) << "decodes of --max-seqs sequences at once";
  EXPECT_EQ(result.prompt_chunk_tokens, 64);
  // Sleeps only ever overshoot: lower bounds are exact, upper bounds leave room for a busy host.
  EXPECT_GE(costs.decode_step_ms(1), 5);
  EXPECT_LT(costs.decode_step_ms(1), 15);
  EXPECT_GE(costs.decode_step_ms(8), 12);
  EXPECT_LT(costs.decode_step_ms(8), 25);
  EXPECT_EQ(costs.decode_step_ms(), costs.decode_step_ms(8)) << "the full batch is measured last";
  // 64 prompt tokens in a step of 4 + 64 ms, beyond a one-token step's 5 ms.
  EXPECT_GT(costs.prefill_ms_per_token(), 0.8);
  EXPECT_LT(costs.prefill_ms_per_token(), 1.4);
}

// Each row pays 20 us per cell in use: the warm-up measures it from the full batch at two fills.
TEST(CostWarmup, MeasuresWhatARowPaysPerCellItAttendsOver) {
  FakeModelRunner runner(8192);
  runner.step_delay = 4ms;
  runner.token_delay = 1ms;
  runner.cell_delay = 20us;
  StepCosts costs(150, 512);
  const WarmupResult result = warm_up_step_costs(runner, costs, 8, 64);
  ASSERT_TRUE(result.ok);
  EXPECT_GE(result.filled_cells, 8 * 64) << "every sequence holds the first one's cells";
  EXPECT_EQ(runner.cells_in_use(), 0);
  EXPECT_EQ(costs.attended_cells(), 0) << "priced at the empty cache again";
  // Sleeps only overshoot, and both fills' steps overshoot alike: the slope is near 0.02 ms.
  EXPECT_GT(costs.row_cell_ms(), 0.015);
  EXPECT_LT(costs.row_cell_ms(), 0.03);
  EXPECT_LT(costs.decode_step_ms(8), 25) << "kept as at no cell: 4 + 8 ms";
  EXPECT_GT(costs.at_attended_cells(1000).decode_step_ms(8), 8 * 1000 * 0.015);

  FakeModelRunner alone(8192);
  alone.cell_delay = 20us;
  StepCosts one(150, 512);
  ASSERT_TRUE(warm_up_step_costs(alone, one, 1, 64).ok);
  EXPECT_EQ(one.row_cell_ms(), 0) << "one sequence: nothing to fill, not measured";
}

TEST(CostWarmup, APromptChunkFitsASequencesShareOfTheCache) {
  FakeModelRunner runner(1024, -1, 97, 16);
  runner.per_sequence = true;  // 64 cells each
  StepCosts costs(150, 512);
  const WarmupResult result = warm_up_step_costs(runner, costs, 16, 256);
  ASSERT_TRUE(result.ok);
  EXPECT_LE(2 * result.prompt_chunk_tokens, 64 - 13) << "room for both chunks and the decodes";
  EXPECT_GE(result.prompt_chunk_tokens, StepCosts::kMinChunkTokens);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_EQ(runner.cells_in_use(), 0);
}

TEST(CostWarmup, AFailedDecodeLeavesTheCostsUnknownAndTheCacheEmpty) {
  FakeModelRunner runner(4096, 20);  // llama.cpp finds room for 20 cells only
  StepCosts costs(150, 512);
  const WarmupResult result = warm_up_step_costs(runner, costs, 8, 64);
  EXPECT_FALSE(result.ok);
  EXPECT_FALSE(costs.decode_cost_settled());
  EXPECT_EQ(runner.cells_in_use(), 0);
}

// A cold server with --max-seqs 4 and --max-queue-delay-ms 2000 takes 20 requests at once,
// each asking for 50 tokens. Returns how many were admitted; expects each admitted one's first
// token within the limit and one round's prompt steps.
int cold_burst_admissions(double target_itl_ms,
                          std::chrono::nanoseconds cell_delay = std::chrono::nanoseconds(0),
                          int prompt_tokens = 20) {
  FakeModelRunner runner(8192);
  runner.step_delay = 10ms;
  runner.token_delay = 1ms;
  runner.cell_delay = cell_delay;
  SchedulerOptions options = testing::options(4, 256);
  options.max_queue_delay_ms = 2000;
  options.max_step_ms = target_itl_ms;
  options.warm_up = true;
  ServingMetrics metrics;
  EngineLoop loop(runner, options, metrics);
  loop.start();

  std::mutex mutex;
  std::condition_variable cv;
  int finished = 0;
  int accepted = 0;
  std::vector<TimePoint> first_token(20);
  const TimePoint burst = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto request = std::make_shared<Request>();
    request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), static_cast<Token>(5 + i));
    request->max_tokens = 50;
    request->max_tokens_named = true;
    request->sampling = testing::greedy();
    request->arrival = Clock::now();
    request->on_update = [&, i](GenerationUpdate&& update) {
      std::lock_guard lock(mutex);
      if (first_token[i] == TimePoint{} && update.completion_tokens > 0) {
        first_token[i] = Clock::now();
      }
      if (update.finished()) {
        ++finished;
        cv.notify_all();
      }
    };
    double estimated_ms = 0;
    const SubmitStatus status = loop.submit(std::move(request), &estimated_ms);
    if (status == SubmitStatus::accepted) {
      ++accepted;
      EXPECT_LE(estimated_ms, 2000);
    } else {
      EXPECT_EQ(status, SubmitStatus::queue_delay) << "request " << i;
      EXPECT_GT(estimated_ms, 2000);
    }
  }
  std::unique_lock lock(mutex);
  EXPECT_TRUE(cv.wait_for(lock, 60s, [&] { return finished == accepted; }));
  for (int i = 0; i < 20; ++i) {
    if (first_token[i] == TimePoint{}) continue;
    EXPECT_LT(ms_between(burst, first_token[i]), 2000 + 300) << "request " << i;
  }
  return accepted;
}

// Decodes of 4 take ~14 ms: a hold of 50 tokens ~0.7 s. Rounds of four start at ~0, ~0.75 and
// ~1.5 s; the fourth (~2.2 s) is refused. Without the warm-up every one was admitted (no cost
// known, no wait estimated).
TEST(CostWarmup, AColdBurstIsAdmittedOnlyAsFarAsItsWaitsFitTheLimit) {
  const int accepted = cold_burst_admissions(0);
  EXPECT_GE(accepted, 8);
  EXPECT_LE(accepted, 12);
}

// With --target-itl-ms 100 too: while every sequence is taken the steps carry no newcomer's
// prompt to fill them up to the target, so a hold is its decodes' steps as without one. The
// estimate that priced every loaded step at the target admitted only the four that start at
// once, where three rounds meet the limit.
TEST(CostWarmup, ABurstsHoldsAreItsDecodesWhateverTheStepTarget) {
  const int accepted = cold_burst_admissions(100);
  EXPECT_GE(accepted, 8);
  EXPECT_LE(accepted, 12);
}

// Each row also pays 1 us per cell in use, and the requests' prompts are 300 tokens: the
// warm-up's full batch ran at ~270 cells, a round of four of these holds ~1,300, and every
// prompt row pays for them too. Priced at the warm-up's fill, 7 were admitted and the last three
// first tokens came at 3.5-5.2 s against the 2 s limit.
TEST(CostWarmup, ABurstsStepsArePricedAtTheCellsItsRequestsWillHold) {
  EXPECT_GE(cold_burst_admissions(0, 1us, 300), 2);
}

}  // namespace
}  // namespace brisk
