// n > 1 on the fake model: the later choices of a request wait for the first to prefill the
// prompt and copy its KV cells (Request::shares_prompt_of), so the prompt is computed once, and
// each choice still generates exactly what it would alone.

#include <gtest/gtest.h>

#include <numeric>

#include "fake_model_runner.h"
#include "scheduler_run.h"

namespace brisk {
namespace {

using namespace testing;  // NOLINT: the harness of scheduler_run.h

// `n` choices of one prompt of `prompt_tokens` tokens, choice i drawn with seed 7 + i.
std::vector<Job> choices(int n, int prompt_tokens) {
  std::vector<Job> out;
  for (int i = 0; i < n; ++i) {
    Job job;
    job.prompt.resize(static_cast<size_t>(prompt_tokens));
    std::iota(job.prompt.begin(), job.prompt.end(), 1);
    job.max_tokens = 10;
    job.sampling = seeded(7 + static_cast<uint32_t>(i));
    job.shares_prompt_of = i == 0 ? -1 : 0;
    out.push_back(job);
  }
  return out;
}

TEST(SharedPromptChoices, ThePromptIsComputedOnceAndEachChoiceIsWhatItWouldBeAlone) {
  // 12 tokens: far below the prefix cache's minimum match, which later choices do not need.
  const std::vector<Job> jobs = choices(3, 12);
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, options(4));
  const auto outcomes = run.all(jobs);
  expect_same_streams(outcomes, alone(jobs));
  EXPECT_EQ(outcomes[0].cached_prompt_tokens, 0);
  for (size_t i = 1; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].cached_prompt_tokens, 11)
        << "choice " << i << " copies all but the prompt's last token, whose logits it needs";
  }
  EXPECT_EQ(runner.prefix_copies(), 2);
  EXPECT_EQ(runner.bad_prefix_copies(), 0);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_LE(run.metric("brisk_prefix_cache_sequences"), 2)
      << "choices sharing their own prompt do not keep it cached past the trial sequences";
  EXPECT_NE(outcomes[0].text, outcomes[1].text) << "different seeds, different choices";
  EXPECT_NE(outcomes[1].text, outcomes[2].text);
}

TEST(SharedPromptChoices, ALongPromptPrefilledInChunksIsStillSharedWhole) {
  const std::vector<Job> jobs = choices(4, 200);  // several 64-token steps
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, options(4));
  const auto outcomes = run.all(jobs);
  expect_same_streams(outcomes, alone(jobs));
  for (size_t i = 1; i < outcomes.size(); ++i) EXPECT_EQ(outcomes[i].cached_prompt_tokens, 199);
  EXPECT_LT(runner.max_cells_used(), 200 + 4 * 11 + 4)
      << "one copy of the prompt's cells, not four";
}

TEST(SharedPromptChoices, WithoutAPrefixCacheEachChoicePrefillsAtOnce) {
  const std::vector<Job> jobs = choices(3, 40);
  FakeModelRunner runner(4096);
  SchedulerOptions off = options(4);
  off.prefix_cache.enabled = false;
  SchedulerRun run(runner, off);
  const auto outcomes = run.all(jobs);
  expect_same_streams(outcomes, alone(jobs));
  EXPECT_EQ(runner.prefix_copies(), 0);
  for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.cached_prompt_tokens, 0);
}

TEST(SharedPromptChoices, OneRunningSequenceRunsTheChoicesInTurn) {
  const std::vector<Job> jobs = choices(3, 50);
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, options(1));
  const auto outcomes = run.all(jobs);
  expect_same_streams(outcomes, alone(jobs));
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_EQ(outcomes[2].cached_prompt_tokens, 49)
      << "the first choice's cells, cached when it finished, serve the later ones";
}

TEST(SharedPromptChoices, LaterChoicesWaitForTheFirstChoicesPrefillByName) {
  SteppedScheduler scheduler(options(4, 64));
  scheduler.submit(1, 10, 4);
  scheduler.submit_choice(2, 1);
  scheduler.step();
  const SchedulerSnapshot& snapshot = scheduler.snapshot();
  ASSERT_EQ(snapshot.waiting.size(), 1u);
  EXPECT_EQ(snapshot.waiting[0].reason, WaitReason::first_choice_prefill);
  EXPECT_EQ(snapshot.admission_blocked, AdmissionBlock::first_choice_prefill);
  for (int i = 0; i < 10; ++i) scheduler.step();
  EXPECT_EQ(scheduler.outcome(2).finish_reason, FinishReason::length);
  EXPECT_EQ(scheduler.outcome(2).timings.cached_prompt_tokens, 9);
}

}  // namespace
}  // namespace brisk
