// The step executor (sched/step_executor.h) on a fake model: a plan the decode refused leaves
// every sequence, the prefix tree and the learned costs as they were; a plan that ran is
// committed, recorded and sampled.
#include "sched/step_executor.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "fake_model_runner.h"

namespace brisk {
namespace {

using testing::FakeModelRunner;

struct Fixture {
  explicit Fixture(int usable_cells) : runner(100, usable_cells) {}
  FakeModelRunner runner;
  ServingMetrics metrics;
  KvManager kv{runner, 4, runner.sequence_ids(), PrefixCacheOptions{}, metrics};
  StepCosts costs{150, 512, 1};
  StepExecutor executor{runner, kv, costs, metrics, 1, Clock::now};
  int updates = 0;

  std::unique_ptr<Sequence> sequence(int prompt_tokens) {
    auto request = std::make_shared<Request>();
    request->prompt_tokens.resize(static_cast<size_t>(prompt_tokens));
    std::iota(request->prompt_tokens.begin(), request->prompt_tokens.end(), 1);
    request->max_tokens = 4;
    request->on_update = [this](GenerationUpdate&&) { ++updates; };
    KvLedger ledger = kv.ledger();
    KvOps ops;
    const int id = ledger.acquire({}, ops);
    kv.adopt(std::move(ledger), ops);
    return std::make_unique<Sequence>(request, id, Clock::now(), 0);
  }
};

TEST(StepExecutor, APlanTheDecodeRefusedChangesNothing) {
  Fixture f(4);  // room for 4 cells only
  auto sequence = f.sequence(10);
  StepPlan plan;
  plan.add_prefill(*sequence, 6);
  EXPECT_EQ(f.executor.run(plan, Clock::now()), DecodeStatus::no_kv_space);
  EXPECT_EQ(sequence->prompt_remaining(), 10);
  EXPECT_EQ(f.kv.used_cells(), 0) << "cells recorded in the prefix tree";
  EXPECT_EQ(f.costs.prefill_ms_per_token(), StepCosts(150, 512, 1).prefill_ms_per_token())
      << "a refused step was learned as a cost";

  plan.clear();
  plan.add_prefill(*sequence, 4);
  EXPECT_EQ(f.executor.run(plan, Clock::now()), DecodeStatus::ok);
  EXPECT_EQ(sequence->prompt_remaining(), 6);
  EXPECT_EQ(f.kv.used_cells(), 4);
  EXPECT_EQ(f.updates, 0) << "a prompt not yet in has no token to sample";
  EXPECT_EQ(f.runner.misplaced_tokens(), 0);
}

TEST(StepExecutor, APlanThatRanIsCommittedRecordedAndSampled) {
  Fixture f(100);
  auto first = f.sequence(3);
  auto second = f.sequence(5);
  StepPlan plan;
  plan.add_prefill(*first, 3);
  plan.add_prefill(*second, 5);
  ASSERT_EQ(f.executor.run(plan, Clock::now()), DecodeStatus::ok);
  EXPECT_TRUE(first->prefill_done());
  EXPECT_TRUE(second->prefill_done());
  EXPECT_EQ(f.kv.used_cells(), 8);
  EXPECT_EQ(f.updates, 2) << "each sequence's first token";

  plan.clear();
  plan.add_decode(*first);
  plan.add_decode(*second);
  ASSERT_EQ(f.executor.run(plan, Clock::now()), DecodeStatus::ok);
  EXPECT_EQ(first->kv_tokens(), 4);
  EXPECT_EQ(second->kv_tokens(), 6);
  EXPECT_EQ(f.updates, 4);
  EXPECT_EQ(f.kv.used_cells(), 10);
  EXPECT_EQ(f.runner.misplaced_tokens(), 0);
}

}  // namespace
}  // namespace brisk
