// The step-cost model behind --target-itl-ms and the queue-delay estimate, fed step times as a
// machine whose step costs a fixed part plus a part per token would produce them.

#include "sched/step_costs.h"

#include <gtest/gtest.h>

namespace brisk {
namespace {

// A step of `decodes` decodes and `prompt` prompt tokens on a machine where a step costs
// 30 ms + 1 ms a decode + 1.5 ms a prompt token.
double step_ms(int decodes, int prompt) { return 30 + decodes + 1.5 * prompt; }

TEST(StepCosts, TheWholeBudgetUntilCostsAreKnownOrWhileNothingDecodes) {
  StepCosts costs(150, 512);
  EXPECT_EQ(costs.prefill_budget(4), 508);
  costs.learn_step(4, 0, step_ms(4, 0));
  costs.learn_step(4, 100, step_ms(4, 100));
  EXPECT_LT(costs.prefill_budget(4), 508);
  EXPECT_EQ(costs.prefill_budget(0), 512) << "no stream decodes: nothing to protect";
  StepCosts off(0, 512);
  off.learn_step(4, 0, step_ms(4, 0));
  off.learn_step(4, 100, step_ms(4, 100));
  EXPECT_EQ(off.prefill_budget(4), 508) << "--target-itl-ms 0 is off";
}

TEST(StepCosts, ChunksConvergeToStepsOfTheTarget) {
  StepCosts costs(150, 512);
  costs.learn_step(4, 0, step_ms(4, 0));
  int chunk = 512;
  for (int i = 0; i < 60; ++i) {
    chunk = costs.prefill_budget(4);
    costs.learn_step(4, chunk, step_ms(4, chunk));
    costs.learn_step(4, 0, step_ms(4, 0));
  }
  EXPECT_NEAR(step_ms(4, chunk), 150, 3) << "chunk of " << chunk << " tokens";
}

// --min-prefill-step-tokens: a step carrying prompt tokens is never under the floor in all,
// however tight the target (llama.cpp's CPU flash attention is tiled from 64 rows).
TEST(StepCosts, AFloorKeepsPromptStepsAtLeastThatLarge) {
  StepCosts tight(40, 512);  // 8 decodes alone take 38 ms: the target leaves ~1 prompt token
  StepCosts floored(40, 512, 64);
  for (StepCosts* costs : {&tight, &floored}) {
    costs->learn_step(8, 0, step_ms(8, 0));
    costs->learn_step(8, 40, step_ms(8, 40));
    costs->learn_step(1, 0, step_ms(1, 0));
  }
  EXPECT_EQ(tight.prefill_budget(8), StepCosts::kMinChunkTokens);
  EXPECT_EQ(floored.prefill_budget(8), 64 - 8);
  EXPECT_EQ(floored.prefill_budget(60), StepCosts::kMinChunkTokens) << "decodes fill most of it";
  EXPECT_GE(floored.long_chunk_budget(0), 64);
  EXPECT_EQ(StepCosts(40, 48, 64).prefill_budget(8), 40) << "never past the token budget";
}

// A long prompt prefilled while nothing decodes: its chunks converge to steps of the target
// too (a short request arriving meanwhile waits for the step), and what any step costs is not
// charged to the chunk's tokens (that made small chunks look dearer step after step).
TEST(StepCosts, ALongPromptAloneIsCutToTheTargetToo) {
  StepCosts costs(150, 512);
  EXPECT_EQ(costs.long_chunk_budget(0), 512) << "costs unknown";
  costs.learn_step(0, 200, step_ms(0, 200));
  EXPECT_EQ(costs.long_chunk_budget(0), 512) << "a step's fixed cost unknown";
  costs.learn_step(1, 0, step_ms(1, 0));
  int chunk = 512;
  for (int i = 0; i < 60; ++i) {
    chunk = costs.long_chunk_budget(0);
    costs.learn_step(0, chunk, step_ms(0, chunk));
  }
  EXPECT_NEAR(step_ms(0, chunk), 150, 3) << "chunk of " << chunk << " tokens";
  EXPECT_EQ(costs.prefill_budget(0), 512) << "short prompts alone keep the whole budget";
  EXPECT_EQ(costs.long_chunk_budget(4), costs.prefill_budget(4)) << "beside decodes: as any";
}

// Where a step's fixed cost alone reaches the target, a long chunk alone still carries three
// times that cost in tokens, not the 16-token floor.
TEST(StepCosts, ALongChunkAloneOutweighsTheStepsFixedCost) {
  StepCosts costs(150, 512);
  const auto slow_step_ms = [](int decodes, int prompt) { return 150 + decodes + 1.5 * prompt; };
  costs.learn_step(1, 0, slow_step_ms(1, 0));
  for (int i = 0; i < 20; ++i) costs.learn_step(0, 300, slow_step_ms(0, 300));
  const int chunk = costs.long_chunk_budget(0);
  EXPECT_GE(chunk, 300);
  EXPECT_LE(150 / slow_step_ms(0, chunk), 0.26) << "chunk of " << chunk << " tokens";
}

// On the CPU a long prompt's chunk alone keeps ggml's tiled attention (64 rows a call and
// more): the target would cut it to a few dozen tokens, each row then taking the per-row kernel
// over its whole context. Beside decodes the target still decides.
TEST(StepCosts, ALongChunkAloneKeepsTheTiledKernelsRows) {
  StepCosts free_costs(150, 512);
  StepCosts tiled(150, 512, 1, 64);
  // A prompt token over a long context: 4 ms, a step 10 ms whatever it carries.
  const auto long_context_ms = [](int decodes, int prompt) {
    return 10 + 8.0 * decodes + 4.0 * prompt;
  };
  for (StepCosts* costs : {&free_costs, &tiled}) {
    costs->learn_step(1, 0, long_context_ms(1, 0));
    costs->learn_step(4, 0, long_context_ms(4, 0));
    for (int i = 0; i < 20; ++i) costs->learn_step(0, 40, long_context_ms(0, 40));
    costs->learn_step(4, 16, long_context_ms(4, 16));
  }
  EXPECT_LT(free_costs.long_chunk_budget(0), 40) << "the target alone: under the tiled kernel";
  EXPECT_EQ(tiled.long_chunk_budget(0), 64);
  EXPECT_EQ(tiled.long_chunk_budget(4), free_costs.long_chunk_budget(4)) << "beside decodes";
  EXPECT_LT(tiled.long_chunk_budget(4), 64);
  EXPECT_EQ(StepCosts(150, 48, 1, 64).long_chunk_budget(0), 48) << "never past the budget";
}

TEST(StepCosts, AFloorKeepsPromptsMovingWhenDecodesFillTheTarget) {
  StepCosts costs(20, 512);  // decodes alone take 34 ms
  costs.learn_step(4, 0, step_ms(4, 0));
  costs.learn_step(4, 64, step_ms(4, 64));
  EXPECT_EQ(costs.prefill_budget(4), StepCosts::kMinChunkTokens);
}

TEST(StepCosts, EachBatchSizeHasItsOwnDecodeCost) {
  StepCosts costs(150, 512);
  for (int i = 0; i < 20; ++i) costs.learn_step(8, 0, 80);
  for (int i = 0; i < 20; ++i) costs.learn_step(2, 0, 30);
  EXPECT_DOUBLE_EQ(costs.decode_step_ms(8), 80);
  EXPECT_DOUBLE_EQ(costs.decode_step_ms(2), 30);
  EXPECT_DOUBLE_EQ(costs.decode_step_ms(), 30) << "the batch measured last";
  EXPECT_DOUBLE_EQ(costs.decode_step_ms(5), 55) << "between two sizes: on the line";
  EXPECT_NEAR(costs.decode_step_ms(14), 130, 1e-9) << "beyond: along the last slope";
  EXPECT_NEAR(costs.decode_step_ms(1), 30 - 50.0 / 6, 1e-9) << "below: the same slope";
  // A prompt chunk beside 8 decodes costs what it adds to *their* step: 140 ms - 80 = 3 ms a
  // token. Priced at the last decode-only step (batch 2, 30 ms) it was 5.5 ms, and the chunk
  // for --target-itl-ms 150 came out at (150 - 30) / 5.5 = 21 tokens instead of 23.
  costs.learn_step(8, 20, 140);
  EXPECT_NEAR(costs.prefill_ms_per_token(), 3, 1e-9);
  EXPECT_EQ(costs.prefill_budget(8), 23);
  EXPECT_EQ(costs.prefill_budget(2), 40) << "(150 - 30) / 3";
}

TEST(StepCosts, HoldsAreCountedInStepsAndPricedAtTheRecentStepTime) {
  StepCosts costs(150, 512);
  EXPECT_EQ(costs.mean_hold_ms(), 0) << "nothing finished";
  for (int i = 0; i < 200; ++i) costs.learn_step(2, 0, 10);
  costs.learn_hold(100);
  EXPECT_DOUBLE_EQ(costs.mean_hold_ms(), 1000);
  costs.learn_hold(200);
  EXPECT_DOUBLE_EQ(costs.mean_hold_ms(), 1100) << "a moving average of 100 and 200 steps";
  EXPECT_DOUBLE_EQ(costs.hold_left_ms(60), 500);
  EXPECT_DOUBLE_EQ(costs.hold_left_ms(500), 0) << "past the average: due now";
  // The batch fills and steps take 30 ms: the same holds now last three times as long. Learned
  // in milliseconds they stayed at 1.1 s, and an overloaded server admitted requests that then
  // waited seconds past --max-queue-delay-ms for a sequence.
  for (int i = 0; i < 200; ++i) costs.learn_step(16, 0, 30);
  EXPECT_NEAR(costs.mean_hold_ms(), 3300, 1);
  EXPECT_NEAR(costs.hold_left_ms(60), 1500, 1);
}

TEST(QueueDelayEstimate, IsTheWorkAheadAtTheMeasuredCosts) {
  LoadEstimate load;
  EXPECT_EQ(estimate_queue_delay_ms(load, 5000, 3, 512), 0) << "nothing measured: no estimate";
  load.decode_step_ms = 20;
  load.prefill_ms_per_token = 2;
  load.backlog_tokens = 100;
  load.decoders = 4;
  load.free_slots = 2;
  // 400 queued + 100 started prompt tokens at 2 ms, in one step shared with 4 decodes (20 ms).
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 400, 1, 512), 1020);
  // Two steps once the tokens ahead pass a step's budget (512 - 4 decodes).
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 500, 1, 512), 1200 + 2 * 20);
  // Sequences: 2 free, 4 running that should free theirs in 100, 3000, 4000 and 5000 ms, each
  // held 6000 ms on average.
  load.slot_release_ms = {100, 3000, 4000, 5000};
  load.hold_ms = 6000;
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 1, 512), 200 + 20) << "a sequence is free";
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 3, 512), 3000) << "second release";
  // The free sequences' first takers give them back after a hold, before the running one that
  // frees first (at 100 ms) is given back a second time.
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 6, 512), 6000) << "second round";
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 8, 512), 100 + 6000);
  load.decoders = 0;
  load.backlog_tokens = 0;
  load.slot_release_ms.clear();
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 0, 512), 0) << "an idle server";
}

TEST(StepCosts, APromptTokenBesideDecodesCarriesItsShareOfTheirStep) {
  StepCosts costs(150, 512);
  EXPECT_EQ(costs.prompt_ms_per_token_beside(4), 0) << "unknown";
  costs.learn_step(4, 0, step_ms(4, 0));      // 34 ms
  costs.learn_step(4, 100, step_ms(4, 100));  // 1.5 ms a prompt token
  ASSERT_EQ(costs.prefill_budget(4), 77);     // (150 - 34) / 1.5
  EXPECT_NEAR(costs.prompt_ms_per_token_beside(4), (34 + 77 * 1.5) / 77, 1e-9);
  EXPECT_DOUBLE_EQ(costs.prompt_ms_per_token_beside(0), 1.5) << "nothing decodes beside it";
  StepCosts off(0, 512);  // no target: whole budgets
  off.learn_step(4, 0, step_ms(4, 0));
  off.learn_step(4, 100, step_ms(4, 100));
  EXPECT_NEAR(off.prompt_ms_per_token_beside(4), (34 + 508 * 1.5) / 508, 1e-9);
}

TEST(QueueDelayEstimate, PromptsStartOneAfterAnotherOnceTheyHaveASequence) {
  LoadEstimate load;
  load.prefill_ms_per_token = 1;
  load.loaded_prefill_ms_per_token = 2;
  load.free_slots = 2;
  load.hold_ms = 1000;
  // Three of 1,000 tokens ahead (2 s each beside the decodes): the first two take the free
  // sequences at once, but the second's prompt starts when the first's is in (2 s), the third
  // takes the first's sequence at 1 s and starts at 4 s; this one gets a sequence at 3 s and
  // starts when the third's prompt is in, at 6 s.
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 3000, 3, 512), 6000);
  load.loaded_prefill_ms_per_token = 0;  // not known: sequences alone
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 3000, 3, 512), 3000) << "3000 tokens at 1 ms";
}

TEST(QueueDelayEstimate, AColdBurstIsPricedByTheHoldTheNewcomerAsksFor) {
  // Costs known (a warm-up), nothing running or finished yet, 16 sequences free.
  LoadEstimate load;
  load.decode_step_ms = 60;
  load.loaded_step_ms = 80;
  load.prefill_ms_per_token = 1;
  load.loaded_prefill_ms_per_token = 1;
  load.free_slots = 16;
  const double hold = expected_hold_ms(load, 200, 100);
  EXPECT_DOUBLE_EQ(hold, 200 + 100 * 80);
  EXPECT_EQ(expected_hold_ms(load, 200, 0), 0) << "no max_tokens named: unknown";
  // The 16 ahead take the free sequences; the 17th waits for the first of them to finish.
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 15, 512, hold), 0);
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 16, 512, hold), hold);
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 32, 512, hold), 2 * hold) << "third round";
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 32, 512, 0), 0)
      << "a newcomer that names no max_tokens: a lower bound";

  // Once requests run: those that named max_tokens free theirs when expected and tell how long
  // the ones behind will hold theirs; the others free theirs after that hold too.
  load.free_slots = 0;
  load.slot_release_ms = {1000, 2000};
  load.unknown_releases = 2;
  load.hold_prior_ms = 5000;
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 1, 512), 2000);
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 2, 512), 5000) << "an unknown one, as long";
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 4, 512), 1000 + 5000);
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 4, 512, 9000), 1000 + 9000)
      << "the longer of the two priors";
  load.hold_ms = 3000;  // measured: the priors give way
  load.slot_release_ms = {1000, 2000, 2500, 2600};
  load.unknown_releases = 0;
  EXPECT_DOUBLE_EQ(estimate_queue_delay_ms(load, 0, 4, 512, 9000), 1000 + 3000);
}

// Each row pays 0.01 ms per cell it attends over: steps learned at their cells are kept as at
// none, and priced at the cells attended when used.
TEST(StepCosts, StepsArePricedAtTheCellsTheirRowsAttendOver) {
  StepCosts costs(150, 512);
  costs.set_row_cell_ms(0.01);
  const auto at_cells = [](int decodes, int prompt, int cells) {
    return step_ms(decodes, prompt) + 0.01 * (decodes + prompt) * cells;
  };
  costs.set_attended_cells(1000);
  costs.learn_step(4, 0, at_cells(4, 0, 1000));      // 34 + 40 ms
  costs.learn_step(4, 100, at_cells(4, 100, 1000));  // 184 + 1040 ms
  EXPECT_NEAR(costs.decode_step_ms(4), 74, 1e-9);
  EXPECT_NEAR(costs.prefill_ms_per_token(), 1.5 + 10, 1e-9);
  costs.set_attended_cells(0);
  EXPECT_NEAR(costs.decode_step_ms(4), 34, 1e-9) << "kept as at no cell";
  EXPECT_NEAR(costs.prefill_ms_per_token(), 1.5, 1e-9);
  EXPECT_EQ(costs.prefill_budget(4), 77) << "(150 - 34) / 1.5";
  const StepCosts full = costs.at_attended_cells(2000);
  EXPECT_NEAR(full.decode_step_ms(4), 34 + 80, 1e-9);
  EXPECT_EQ(full.prefill_budget(4), 16) << "(150 - 114) / 21.5 is under the floor";
  EXPECT_EQ(costs.attended_cells(), 0) << "a priced copy leaves the costs as they were";
}

TEST(QueueDelayEstimate, AFullBatchIsPricedAtTheCellsItsRequestsWouldHold) {
  StepCosts costs(150, 512);
  costs.learn_step(4, 0, step_ms(4, 0));      // 34 ms
  costs.learn_step(4, 100, step_ms(4, 100));  // 1.5 ms a prompt token
  LoadEstimate load;
  load.costs = costs;
  load.max_seqs = 5;  // a newcomer's prompt beside 4 decodes
  load.cell_capacity = 8192;
  load.loaded_step_ms = loaded_step_ms(costs, 5);
  load.loaded_prefill_ms_per_token = costs.prompt_ms_per_token_beside(4);
  EXPECT_DOUBLE_EQ(priced_for_requests_like(load, 5, 300, 500).loaded_prefill_ms_per_token,
                   load.loaded_prefill_ms_per_token)
      << "no cell cost known";
  load.costs.set_row_cell_ms(0.002);
  // Five requests of (300 + 500) / 2 cells on average over their holds: 2,000 cells, 4 ms a
  // decode row more.
  const LoadEstimate full = priced_for_requests_like(load, 5, 300, 500);
  EXPECT_NEAR(full.costs.decode_step_ms(4), 34 + 16, 1e-9);
  EXPECT_DOUBLE_EQ(full.loaded_step_ms, 150) << "the target still bounds a loaded step";
  EXPECT_GT(full.loaded_prefill_ms_per_token, 1.5 * load.loaded_prefill_ms_per_token);
  EXPECT_NEAR(full.loaded_prefill_ms_per_token, full.costs.prompt_ms_per_token_beside(4), 1e-9);
  EXPECT_NEAR(full.prefill_ms_per_token, 1.5 + 4, 1e-9) << "the prompts ahead too";
  EXPECT_GT(expected_hold_ms(full, 300, 500), expected_hold_ms(load, 300, 500));
  load.cells_per_sequence = true;  // a row attends its own sequence's 400 cells
  EXPECT_NEAR(priced_for_requests_like(load, 5, 300, 500).costs.decode_step_ms(4), 34 + 3.2, 1e-9);
  load.cells_per_sequence = false;
  EXPECT_EQ(priced_for_requests_like(load, 2, 300, 500).costs.attended_cells(), 800)
      << "two such requests";
  EXPECT_EQ(priced_for_requests_like(load, 40, 300, 500).costs.attended_cells(), 2000)
      << "a full batch at most";
  load.costs.set_attended_cells(3000);  // in use now, and theirs beside
  EXPECT_EQ(priced_for_requests_like(load, 5, 300, 500).costs.attended_cells(), 5000);
  load.cell_capacity = 4000;
  EXPECT_EQ(priced_for_requests_like(load, 5, 300, 500).costs.attended_cells(), 4000);
}

}  // namespace
}  // namespace brisk
