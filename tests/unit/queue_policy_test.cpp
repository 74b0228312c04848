// Which waiting request starts next (--policy): the QueuePolicy alone, then the scheduler on the
// fake model — priorities, preemption for a higher priority, and deadlines.

#include "sched/queue_policy.h"

#include <gtest/gtest.h>

#include "fake_model_runner.h"
#include "scheduler_run.h"

namespace brisk {
namespace {

using namespace testing;  // NOLINT: the harness of scheduler_run.h

std::shared_ptr<Request> waiting_request(int prompt_tokens, TimePoint arrival, int priority = 0,
                                         double deadline_ms = 0) {
  auto request = std::make_shared<Request>();
  request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 1);
  request->arrival = arrival;
  request->priority = priority;
  request->deadline_ms = deadline_ms;
  return request;
}

const auto any = [](const Request&) { return true; };
const auto over_100 = [](const Request& r) { return r.prompt_tokens.size() > 100; };
using std::chrono::milliseconds;

TEST(QueuePolicy, FcfsTakesTheOldestEligible) {
  const TimePoint t0 = Clock::now();
  std::deque<std::shared_ptr<Request>> queue = {waiting_request(500, t0, 5),
                                                waiting_request(10, t0 + milliseconds(1), 0)};
  QueuePolicy fcfs({SchedulingPolicy::fcfs});
  EXPECT_EQ(fcfs.pick(queue, any, over_100, t0, 0), 0);
  EXPECT_EQ(fcfs.pick(queue, [](const Request& r) { return r.prompt_tokens.size() < 100; },
                      over_100, t0, 0),
            1);
}

TEST(QueuePolicy, PriorityTakesTheLowestNumberThenTheOldest) {
  const TimePoint t0 = Clock::now();
  std::deque<std::shared_ptr<Request>> queue = {waiting_request(10, t0, 3),
                                                waiting_request(10, t0 + milliseconds(1), 1),
                                                waiting_request(10, t0 + milliseconds(2), 1)};
  QueuePolicy priority({SchedulingPolicy::priority, /*aging*/ 0});
  EXPECT_EQ(priority.pick(queue, any, over_100, t0 + milliseconds(3), 0), 1);
}

TEST(QueuePolicy, AgingLetsALowPriorityRequestThrough) {
  const TimePoint t0 = Clock::now();
  QueuePolicy aged({SchedulingPolicy::priority, 10000});  // one level per 10 s waited
  // Priority 3 waiting since t0, against a priority 0 arriving at the moment of the pick.
  auto pick_at = [&](milliseconds waited) {
    std::deque<std::shared_ptr<Request>> queue = {waiting_request(10, t0, 3),
                                                  waiting_request(10, t0 + waited, 0)};
    return aged.pick(queue, any, over_100, t0 + waited, 0);
  };
  EXPECT_EQ(pick_at(milliseconds(25000)), 1) << "3 - 2.5 is still above 0";
  EXPECT_EQ(pick_at(milliseconds(35000)), 0) << "3 - 3.5 is below 0";
  QueuePolicy no_aging({SchedulingPolicy::priority, 0});
  std::deque<std::shared_ptr<Request>> queue = {waiting_request(10, t0, 3),
                                                waiting_request(10, t0 + milliseconds(35000), 0)};
  EXPECT_EQ(no_aging.pick(queue, any, over_100, t0 + milliseconds(35000), 0), 1);
}

TEST(QueuePolicy, SloTakesTheEarliestDeadlineAndLetsAShortOneAheadWhenThatSavesIt) {
  const TimePoint t0 = Clock::now();
  QueuePolicy slo({SchedulingPolicy::slo, 0, /*slo_ttft_ms*/ 2000});
  // A long prompt (1,000 tokens at 1 ms each) due at 1.5 s and a short one due at 1.8 s: behind
  // the long one the short one would start at 1.0 s and finish its prefill at 1.01 s: in time.
  std::deque<std::shared_ptr<Request>> queue = {waiting_request(1000, t0, 0, 1500),
                                                waiting_request(10, t0, 0, 1800)};
  EXPECT_EQ(slo.pick(queue, any, over_100, t0, 1.0), 0);
  // Due at 900 ms instead: it would miss behind the long one, and the long one still meets
  // 1.5 s after it.
  queue[1]->deadline_ms = 900;
  EXPECT_EQ(slo.pick(queue, any, over_100, t0, 1.0), 1);
  // The long one due at 950 ms, the short one at 1 s: the short one misses behind the long
  // one, but the long one would miss after it, so the earliest deadline keeps its place.
  queue[0]->deadline_ms = 950;
  queue[1]->deadline_ms = 1000;
  EXPECT_EQ(slo.pick(queue, any, over_100, t0, 1.0), 0);
  // No deadline sent: --slo-ttft-ms after arrival.
  EXPECT_EQ(slo.deadline(*waiting_request(10, t0)), t0 + milliseconds(2000));
}

SchedulerOptions with_policy(SchedulingPolicy policy, int max_seqs) {
  SchedulerOptions out = options(max_seqs);
  out.queue_policy.policy = policy;
  return out;
}

Job job(int first_token, int prompt_tokens, int max_tokens, int priority = 0) {
  Job out;
  out.prompt.resize(static_cast<size_t>(prompt_tokens));
  std::iota(out.prompt.begin(), out.prompt.end(), first_token);
  out.max_tokens = max_tokens;
  out.sampling = greedy();
  out.priority = priority;
  return out;
}

TEST(StepSchedulerPolicy, PriorityStartsTheLowestNumberFirst) {
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, with_policy(SchedulingPolicy::priority, 1));
  const auto outcomes = run.all({job(1, 20, 10, 5), job(100, 20, 10, 5), job(200, 20, 10, 0)});
  EXPECT_EQ(outcomes[2].finish_order, 0);
  EXPECT_EQ(outcomes[0].finish_order, 1);
  EXPECT_EQ(outcomes[1].finish_order, 2);

  FakeModelRunner fcfs_runner(4096);
  SchedulerRun fcfs(fcfs_runner, with_policy(SchedulingPolicy::fcfs, 1));
  EXPECT_EQ(fcfs.all({job(1, 20, 10, 5), job(100, 20, 10, 5), job(200, 20, 10, 0)})[2]
                .finish_order,
            2)
      << "fcfs ignores priorities";
}

TEST(StepSchedulerPolicy, AHigherPriorityPreemptsTheLowestRunningAndStreamsStayExact) {
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, with_policy(SchedulingPolicy::priority, 2));
  std::vector<Job> work = {job(1, 20, 80, 3), job(100, 20, 80, 1), job(200, 20, 10, 0)};
  work[2].submit_before_decode = 10;  // arrives while both sequences are taken
  const auto outcomes = run.all(work);
  expect_same_streams(outcomes, alone(work));
  EXPECT_EQ(outcomes[2].finish_order, 0) << "the priority-0 request waited for a sequence";
  EXPECT_EQ(run.metric("brisk_preemptions_total"), 1) << "the priority-3 one made room";
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

TEST(StepSchedulerPolicy, ARequestPastItsDeadlineIsDroppedUncomputed) {
  FakeModelRunner runner(4096);
  runner.step_delay = std::chrono::milliseconds(5);
  FakeClock clock;
  SchedulerOptions opts = with_policy(SchedulingPolicy::fcfs, 1);
  use_fake_clock(clock, runner, opts);
  SchedulerRun run(runner, opts);
  std::vector<Job> work = {job(1, 20, 60), job(100, 20, 10)};
  work[1].deadline_ms = 50;  // the first holds the only sequence for 60 steps of 5 ms
  const auto outcomes = run.all(work);
  EXPECT_EQ(outcomes[0].reason, FinishReason::length);
  EXPECT_EQ(outcomes[1].reason, FinishReason::deadline);
  EXPECT_EQ(outcomes[1].completion_tokens, 0);
  EXPECT_NE(outcomes[1].error.find("deadline"), std::string::npos) << outcomes[1].error;
  EXPECT_EQ(run.metric("brisk_requests_finished_total{finished_reason=\"deadline\"}"), 1);
  EXPECT_EQ(runner.decodes(), 60) << "the first request's prefill and 59 decodes: the dropped one was never prefilled";
}

// Under a steady stream of priority-0 requests, a priority-3 one starts once it has waited
// 3 x --priority-aging-ms (and then ties with newcomers, and arrived first); without aging it
// would wait for the stream to end. Driven a step at a time on a fake clock.
int steps_until_low_priority_starts(double priority_aging_ms) {
  SchedulerOptions opts = with_policy(SchedulingPolicy::priority, 1);
  opts.queue_policy.priority_aging_ms = priority_aging_ms;
  SteppedScheduler run(opts);
  run.submit(0, 8, 1, /*priority=*/3);
  for (int step = 1; step <= 40; ++step) {
    run.submit(static_cast<uint64_t>(step), 8, 1, /*priority=*/0);
    run.step();
    if (run.outcome(0).completion_tokens > 0) return step;
    run.advance(std::chrono::milliseconds(50));
  }
  return -1;
}

TEST(StepSchedulerPolicy, AgingStartsALowPriorityRequestUnderAStreamOfHigherOnes) {
  const int step = steps_until_low_priority_starts(100);
  EXPECT_GE(step, 7) << "it overtook priority-0 requests before aging 300 ms";
  EXPECT_LE(step, 9);
  EXPECT_EQ(steps_until_low_priority_starts(0), -1) << "without aging it starts only at the end";
}

}  // namespace
}  // namespace brisk
