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

// A step of fewer than 64 prompt tokens runs them through ggml-cpu's per-row attention kernel,
// dearer per token: such steps teach a price of their own, and a chunk cut to the target is a
// tiled one whenever one fits (more tokens in the same time), else a small one at its price.
TEST(StepCosts, ChunksUnderTheTiledKernelArePricedOnTheirOwn) {
  StepCosts costs(150, 512);
  costs.learn_step(1, 0, 10);
  costs.learn_step(4, 0, 30);
  costs.learn_step(0, 128, 10 + 128 * 1.5);
  EXPECT_NEAR(costs.prompt_token_ms(32), 1.5, 1e-9) << "no small chunk measured: as a large one";
  costs.learn_step(0, 32, 10 + 32 * 2.5);
  EXPECT_NEAR(costs.prefill_ms_per_token(), 1.5, 1e-9);
  EXPECT_NEAR(costs.prompt_token_ms(32), 2.5, 1e-9);
  EXPECT_NEAR(costs.prompt_token_ms(64), 1.5, 1e-9);
  EXPECT_NEAR(costs.step_ms(4, 32), 30 + 32 * 2.5, 1e-9);
  EXPECT_NEAR(costs.step_ms(4, 80), 30 + 80 * 1.5, 1e-9);
  EXPECT_EQ(costs.prefill_budget(4), 80) << "(150 - 30) / 1.5: a tiled chunk fits";
  costs.learn_step(8, 0, 60);
  EXPECT_EQ(costs.prefill_budget(8), 36) << "(150 - 60) / 1.5 = 60 is under 64: (150 - 60) / 2.5";
  const StepCosts stored = StepCosts::from_table(costs.table(), 150, 512);
  EXPECT_NEAR(stored.prompt_token_ms(32), 2.5, 1e-9) << "kept in the table";
  EXPECT_EQ(stored.prefill_budget(8), 36);
}

}  // namespace
}  // namespace brisk
