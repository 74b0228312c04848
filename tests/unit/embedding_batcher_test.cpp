#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "fake_clock.h"
#include "sched/batch_window.h"
#include "sched/embedding_batcher.h"

namespace brisk {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

// --- plan_batch: the queue in, the next batch out --------------------------------------------

std::vector<WaitingInput> inputs_at(TimePoint arrival, std::initializer_list<int> tokens) {
  std::vector<WaitingInput> queue;
  for (int count : tokens) queue.push_back({count, arrival});
  return queue;
}

TEST(BatchWindow, WaitsForTheWindowThenTakesEverything) {
  const TimePoint t0 = Clock::now();
  const BatchWindowOptions options{.window_ms = 10};
  const auto queue = inputs_at(t0, {8, 8, 8});
  const BatchDecision early = plan_batch(queue, t0 + milliseconds(4), 1000, 64, options);
  EXPECT_EQ(early.inputs, 0);
  ASSERT_TRUE(early.wake_at.has_value());
  EXPECT_EQ(*early.wake_at, t0 + milliseconds(10));
  const BatchDecision due = plan_batch(queue, t0 + milliseconds(10), 1000, 64, options);
  EXPECT_EQ(due.inputs, 3);
  EXPECT_EQ(due.trigger, BatchTrigger::window);
}

TEST(BatchWindow, AZeroWindowRunsAtOnce) {
  const TimePoint t0 = Clock::now();
  const BatchDecision decision = plan_batch(inputs_at(t0, {5}), t0, 1000, 64, {});
  EXPECT_EQ(decision.inputs, 1);
}

TEST(BatchWindow, AFullBatchRunsWithoutWaiting) {
  const TimePoint t0 = Clock::now();
  const BatchWindowOptions options{.window_ms = 1000};
  // By tokens: 40 + 40 fit in 100, the third does not.
  const BatchDecision by_tokens = plan_batch(inputs_at(t0, {40, 40, 40}), t0, 100, 64, options);
  EXPECT_EQ(by_tokens.inputs, 2);
  EXPECT_EQ(by_tokens.trigger, BatchTrigger::full);
  // By inputs.
  const BatchDecision by_inputs = plan_batch(inputs_at(t0, {1, 1, 1}), t0, 100, 2, options);
  EXPECT_EQ(by_inputs.inputs, 2);
  EXPECT_EQ(by_inputs.trigger, BatchTrigger::full);
  // Exactly full by tokens is not "full": nothing is left over to start it.
  EXPECT_EQ(plan_batch(inputs_at(t0, {50, 50}), t0, 100, 64, options).inputs, 0);
}

TEST(BatchWindow, ThePreferredSizeTheQueueCanFillRunsAtOnce) {
  const TimePoint t0 = Clock::now();
  const BatchWindowOptions options{.window_ms = 1000, .preferred_batch_sizes = {2, 4, 8}};
  const BatchDecision five = plan_batch(inputs_at(t0, {1, 1, 1, 1, 1}), t0, 100, 64, options);
  EXPECT_EQ(five.inputs, 4);
  EXPECT_EQ(five.trigger, BatchTrigger::preferred_size);
  EXPECT_EQ(plan_batch(inputs_at(t0, {1}), t0, 100, 64, options).inputs, 0);
}

TEST(BatchWindow, TheWindowCountsFromTheOldestInputNotTheFirstInLine) {
  const TimePoint t0 = Clock::now();
  const BatchWindowOptions options{.window_ms = 10};
  // A high-priority input that just arrived is first; a low-priority one has waited 9 ms.
  const std::vector<WaitingInput> queue = {{4, t0 + milliseconds(9)}, {4, t0}};
  const BatchDecision decision = plan_batch(queue, t0 + milliseconds(9), 1000, 64, options);
  ASSERT_TRUE(decision.wake_at.has_value());
  EXPECT_EQ(*decision.wake_at, t0 + milliseconds(10));
}

// --- EmbeddingBatcher on a fake runner and a fake clock --------------------------------------

// Each input's vector is {first token, token count}; every batch is recorded. A test may hold
// the runner inside embed() to pile up a queue behind a running batch.
class FakeEmbeddingRunner : public EmbeddingRunner {
 public:
  int dimensions() const override { return 2; }
  int max_batch_tokens() const override { return max_tokens; }
  int max_batch_inputs() const override { return max_inputs; }
  bool embed(std::span<const TokenList* const> inputs, std::vector<float>* vectors,
             std::string* error) override {
    std::unique_lock lock(mutex);
    std::vector<Token> firsts;
    for (const TokenList* input : inputs) {
      firsts.push_back(input->front());
      vectors->push_back(static_cast<float>(input->front()));
      vectors->push_back(static_cast<float>(input->size()));
    }
    batches.push_back(firsts);
    changed.notify_all();
    changed.wait(lock, [this] { return !held; });
    if (fail) *error = "the fake runner failed";
    return !fail;
  }
  void hold() {
    std::lock_guard lock(mutex);
    held = true;
  }
  void release() {
    std::lock_guard lock(mutex);
    held = false;
    changed.notify_all();
  }
  bool wait_for_batches(size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(5), [&] { return batches.size() >= count; });
  }
  std::vector<std::vector<Token>> recorded() {
    std::lock_guard lock(mutex);
    return batches;
  }

  std::atomic<int> max_tokens = 1000;
  std::atomic<int> max_inputs = 64;
  std::atomic<bool> fail = false;

 private:
  std::mutex mutex;
  std::condition_variable changed;
  bool held = false;
  std::vector<std::vector<Token>> batches;
};

struct Submitted {
  std::shared_ptr<EmbeddingJob> job;
  std::future<EmbeddingOutcome> outcome;
};

// A job whose inputs are {first, first, ...} of `lengths` tokens.
Submitted make_job(FakeClock& clock, std::vector<std::pair<Token, int>> inputs, int priority = 0,
                   double deadline_ms = 0) {
  auto promise = std::make_shared<std::promise<EmbeddingOutcome>>();
  Submitted submitted{std::make_shared<EmbeddingJob>(), promise->get_future()};
  for (const auto& [first, length] : inputs) {
    submitted.job->inputs.push_back(TokenList(static_cast<size_t>(length), first));
  }
  submitted.job->priority = priority;
  submitted.job->deadline_ms = deadline_ms;
  submitted.job->arrival = clock.now();
  submitted.job->on_done = [promise](EmbeddingOutcome&& outcome) {
    promise->set_value(std::move(outcome));
  };
  return submitted;
}

class EmbeddingBatcherTest : public ::testing::Test {
 protected:
  void start(BatchWindowOptions options) {
    batcher = std::make_unique<EmbeddingBatcher>(runner, options, metrics, clock.function());
    batcher->start();
  }
  void TearDown() override {
    runner.release();
    if (batcher) batcher->shutdown(milliseconds(0));
  }
  static bool ready(std::future<EmbeddingOutcome>& outcome, milliseconds within) {
    return outcome.wait_for(within) == std::future_status::ready;
  }

  FakeClock clock;
  FakeEmbeddingRunner runner;
  EmbeddingMetrics metrics;
  std::unique_ptr<EmbeddingBatcher> batcher;
};

TEST_F(EmbeddingBatcherTest, RequestsWithinTheWindowShareOneBatch) {
  start({.window_ms = 10});
  Submitted a = make_job(clock, {{1, 3}});
  Submitted b = make_job(clock, {{2, 3}});
  ASSERT_EQ(batcher->submit(a.job), EmbeddingSubmit::accepted);
  ASSERT_EQ(batcher->submit(b.job), EmbeddingSubmit::accepted);
  EXPECT_FALSE(ready(a.outcome, milliseconds(50))) << "ran before its window closed";
  clock.advance(milliseconds(10));
  batcher->wake();
  ASSERT_TRUE(ready(a.outcome, milliseconds(5000)));
  ASSERT_TRUE(ready(b.outcome, milliseconds(5000)));
  EXPECT_EQ(runner.recorded(), (std::vector<std::vector<Token>>{{1, 2}}));
  const EmbeddingOutcome got = b.outcome.get();
  EXPECT_EQ(got.status, EmbeddingOutcome::Status::done);
  EXPECT_EQ(got.vectors, (std::vector<float>{2, 3}));
  EXPECT_DOUBLE_EQ(got.queue_ms, 10.0);
}

TEST_F(EmbeddingBatcherTest, APreferredSizeStartsWithoutTheWindow) {
  start({.window_ms = 1000, .preferred_batch_sizes = {2}});
  Submitted a = make_job(clock, {{1, 3}, {2, 3}});
  ASSERT_EQ(batcher->submit(a.job), EmbeddingSubmit::accepted);
  ASSERT_TRUE(ready(a.outcome, milliseconds(5000)));
  EXPECT_EQ(runner.recorded(), (std::vector<std::vector<Token>>{{1, 2}}));
}

TEST_F(EmbeddingBatcherTest, ARequestLargerThanABatchSpansBatchesAndKeepsItsOrder) {
  runner.max_inputs = 2;
  start({});
  Submitted a = make_job(clock, {{1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}});
  ASSERT_EQ(batcher->submit(a.job), EmbeddingSubmit::accepted);
  ASSERT_TRUE(ready(a.outcome, milliseconds(5000)));
  EXPECT_EQ(runner.recorded(), (std::vector<std::vector<Token>>{{1, 2}, {3, 4}, {5}}));
  const EmbeddingOutcome got = a.outcome.get();
  EXPECT_EQ(got.vectors, (std::vector<float>{1, 2, 2, 3, 3, 4, 4, 5, 5, 6}));
  EXPECT_EQ(got.batches, 3);
}

TEST_F(EmbeddingBatcherTest, AHigherPriorityRequestOvertakesTheQueue) {
  start({});
  runner.hold();
  Submitted first = make_job(clock, {{1, 1}});
  ASSERT_EQ(batcher->submit(first.job), EmbeddingSubmit::accepted);
  ASSERT_TRUE(runner.wait_for_batches(1));  // the runner is busy with it
  Submitted low = make_job(clock, {{2, 1}}, /*priority=*/5);
  Submitted high = make_job(clock, {{3, 1}}, /*priority=*/-5);
  runner.max_inputs = 1;  // one input a batch, so the order shows
  ASSERT_EQ(batcher->submit(low.job), EmbeddingSubmit::accepted);
  ASSERT_EQ(batcher->submit(high.job), EmbeddingSubmit::accepted);
  runner.release();
  ASSERT_TRUE(ready(low.outcome, milliseconds(5000)));
  EXPECT_EQ(runner.recorded(), (std::vector<std::vector<Token>>{{1}, {3}, {2}}));
}

TEST_F(EmbeddingBatcherTest, ARequestPastItsDeadlineIsDroppedUncomputed) {
  start({.window_ms = 1000});
  Submitted late = make_job(clock, {{1, 1}}, 0, /*deadline_ms=*/5);
  ASSERT_EQ(batcher->submit(late.job), EmbeddingSubmit::accepted);
  clock.advance(milliseconds(6));
  batcher->wake();
  ASSERT_TRUE(ready(late.outcome, milliseconds(5000)));
  EXPECT_EQ(late.outcome.get().status, EmbeddingOutcome::Status::deadline);
  EXPECT_TRUE(runner.recorded().empty());
}

// A client that closed its connection while its inputs waited behind a running batch: they are
// dropped uncomputed when the batch ends, and the next request's inputs run.
TEST_F(EmbeddingBatcherTest, ACancelledRequestsQueuedInputsAreDroppedUncomputed) {
  start({});
  runner.hold();
  Submitted running = make_job(clock, {{1, 1}});
  ASSERT_EQ(batcher->submit(running.job), EmbeddingSubmit::accepted);
  ASSERT_TRUE(runner.wait_for_batches(1));
  Submitted gone = make_job(clock, {{2, 1}, {3, 1}});
  Submitted next = make_job(clock, {{4, 1}});
  ASSERT_EQ(batcher->submit(gone.job), EmbeddingSubmit::accepted);
  ASSERT_EQ(batcher->submit(next.job), EmbeddingSubmit::accepted);
  gone.job->cancelled = true;
  runner.release();
  ASSERT_TRUE(ready(gone.outcome, milliseconds(5000)));
  EXPECT_EQ(gone.outcome.get().status, EmbeddingOutcome::Status::cancelled);
  ASSERT_TRUE(ready(next.outcome, milliseconds(5000)));
  EXPECT_EQ(next.outcome.get().status, EmbeddingOutcome::Status::done);
  for (const auto& batch : runner.recorded()) {
    for (const Token token : batch) EXPECT_TRUE(token != 2 && token != 3) << "computed anyway";
  }
  EXPECT_EQ(batcher->queued_requests(), 0);
}

TEST_F(EmbeddingBatcherTest, AFullQueueRefusesAndAFailedBatchFailsItsRequests) {
  start({.max_queued_inputs = 3});
  runner.hold();
  Submitted first = make_job(clock, {{1, 1}});
  ASSERT_EQ(batcher->submit(first.job), EmbeddingSubmit::accepted);
  ASSERT_TRUE(runner.wait_for_batches(1));
  Submitted big = make_job(clock, {{2, 1}, {3, 1}, {4, 1}, {5, 1}});
  EXPECT_EQ(batcher->submit(big.job), EmbeddingSubmit::queue_full);
  runner.fail = true;
  runner.release();
  ASSERT_TRUE(ready(first.outcome, milliseconds(5000)));
  const EmbeddingOutcome got = first.outcome.get();
  EXPECT_EQ(got.status, EmbeddingOutcome::Status::failed);
  EXPECT_NE(got.error.find("fake runner failed"), std::string::npos);
}

TEST_F(EmbeddingBatcherTest, ShutdownAnswersEveryQueuedRequest) {
  start({.window_ms = 100000});
  Submitted waiting = make_job(clock, {{1, 1}});
  ASSERT_EQ(batcher->submit(waiting.job), EmbeddingSubmit::accepted);
  batcher->shutdown(milliseconds(0));
  ASSERT_TRUE(ready(waiting.outcome, milliseconds(5000)));
  EXPECT_EQ(waiting.outcome.get().status, EmbeddingOutcome::Status::shutting_down);
  EXPECT_EQ(batcher->submit(make_job(clock, {{2, 1}}).job), EmbeddingSubmit::shutting_down);
}

}  // namespace
}  // namespace brisk
