// A step's plan moves no sequence until it is committed: a decode that finds no KV room drops
// the plan and leaves every sequence where it was.

#include "sched/step_plan.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "fake_model_runner.h"

namespace brisk {
namespace {

using testing::FakeModelRunner;

std::unique_ptr<Sequence> sequence_with_prompt(int prompt_tokens) {
  auto request = std::make_shared<Request>();
  request->prompt_tokens.resize(static_cast<size_t>(prompt_tokens));
  std::iota(request->prompt_tokens.begin(), request->prompt_tokens.end(), 1);
  request->max_tokens = 4;
  request->on_update = [](GenerationUpdate&&) {};
  return std::make_unique<Sequence>(request, 0, Clock::now(), 0);
}

TEST(StepPlan, ADroppedPlanLeavesTheSequenceWhereItWas) {
  FakeModelRunner runner(100, 4);  // room for 4 cells only
  auto sequence = sequence_with_prompt(10);
  StepPlan plan;
  plan.add_prefill(*sequence, 6);
  plan.fill_batch(runner);
  ASSERT_EQ(runner.decode(), DecodeStatus::no_kv_space);
  EXPECT_EQ(sequence->prompt_remaining(), 10);
  EXPECT_EQ(sequence->kv_tokens(), 0);

  plan.clear();
  plan.add_prefill(*sequence, 4);
  plan.fill_batch(runner);
  ASSERT_EQ(runner.decode(), DecodeStatus::ok);
  plan.commit();
  EXPECT_EQ(sequence->prompt_remaining(), 6);
  EXPECT_EQ(sequence->kv_tokens(), 4);
  EXPECT_EQ(runner.misplaced_tokens(), 0) << "the retried chunk did not start at position 0";
}

TEST(StepPlan, CommittedChunksAndDecodesFollowEachOther) {
  FakeModelRunner runner(100);
  auto sequence = sequence_with_prompt(5);
  StepPlan plan;
  plan.add_prefill(*sequence, 3);
  plan.fill_batch(runner);
  EXPECT_EQ(plan.entries()[0].logits_index, -1) << "logits before the prompt's end";
  ASSERT_EQ(runner.decode(), DecodeStatus::ok);
  plan.commit();

  plan.clear();
  plan.add_prefill(*sequence, 2);
  plan.fill_batch(runner);
  EXPECT_EQ(plan.entries()[0].logits_index, 1) << "the prompt's last token wants logits";
  ASSERT_EQ(runner.decode(), DecodeStatus::ok);
  plan.commit();
  EXPECT_TRUE(sequence->prefill_done());

  plan.clear();
  plan.add_decode(*sequence);
  EXPECT_EQ(plan.decode_tokens(), 1);
  EXPECT_EQ(plan.tokens(), 1);
  plan.fill_batch(runner);
  EXPECT_EQ(plan.entries()[0].logits_index, 0);
  ASSERT_EQ(runner.decode(), DecodeStatus::ok);
  plan.commit();
  EXPECT_EQ(sequence->kv_tokens(), 6);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

}  // namespace
}  // namespace brisk
