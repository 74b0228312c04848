// The scheduler on a fake model (fake_model_runner.h): KV accounted as used, preemption and
// recompute, retries when the runner finds no KV room, and the drain.

#include "sched/engine_loop.h"
#include "sched/step_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fake_model_runner.h"
#include "scheduler_run.h"

namespace brisk {
namespace {

using testing::FakeModelRunner;
using namespace testing;  // NOLINT: the harness of scheduler_run.h

TEST(StepScheduler, PreemptedRequestsGenerateExactlyWhatTheyWouldAlone) {
  for (const SamplingParams& sampling : {greedy(), seeded(7)}) {
    const auto work = jobs(6, 20, 60, sampling);  // up to 95 cells each, 6 at once
    FakeModelRunner runner(200);
    SchedulerRun run(runner, options(6));
    const auto together = run.all(work);
    expect_same_streams(together, alone(work));
    EXPECT_GT(run.metric("brisk_preemptions_total"), 0) << "the cache never ran out";
    EXPECT_EQ(runner.misplaced_tokens(), 0);
    EXPECT_LE(runner.max_cells_used(), 200);
    // What the finished requests left is the prefix cache's, and counted as such.
    EXPECT_EQ(runner.cells_in_use(), run.metric("brisk_prefix_cache_cells"));
    EXPECT_EQ(run.metric("brisk_kv_cache_usage_ratio"), 0);
    EXPECT_EQ(run.stats().waiting, 0);
    EXPECT_EQ(run.stats().preempted, 0);
  }
}

// With a host tier, a preempted request's KV state is saved there and restored when it resumes
// (not recomputed), and every stream is still what it is alone.
TEST(StepScheduler, PreemptedRequestsResumeFromTheHostTierExactly) {
  for (const SamplingParams& sampling : {greedy(), seeded(7)}) {
    const auto work = jobs(6, 20, 60, sampling);
    FakeModelRunner runner(200);
    SchedulerOptions swapping = options(6);
    swapping.prefix_cache.host_bytes = size_t(1) << 20;
    SchedulerRun run(runner, swapping);
    const auto together = run.all(work);
    expect_same_streams(together, alone(work));
    const double swaps = run.metric("brisk_preemption_swaps_total");
    EXPECT_GT(swaps, 0) << "no preempted request was saved to the host tier";
    EXPECT_LE(swaps, run.metric("brisk_preemptions_total"));
    EXPECT_GT(runner.restores(), 0) << "no preempted request resumed by a restore";
    EXPECT_EQ(runner.failed_restores(), 0);
    EXPECT_EQ(runner.misplaced_tokens(), 0);
    EXPECT_LE(runner.max_cells_used(), 200);
  }
}

// The openai SDK sends no max_tokens; the server then allows everything left of the context.
// Such requests used to reserve the whole cache and run one at a time.
TEST(StepScheduler, RequestsWithoutMaxTokensRunSideBySide) {
  const int context = 1000;
  const auto work = jobs(4, 10, context - 20, greedy());
  FakeModelRunner runner(context);
  SchedulerRun run(runner, options(4));
  const auto together = run.all(work);
  EXPECT_EQ(runner.max_sequences_in_a_step(), 4);
  expect_same_streams(together, alone(work));
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

// llama.cpp may find no room for a batch that the scheduler's count let through: the step is
// built again after a preemption, and nobody fails.
TEST(StepScheduler, NoKvRoomIsRetriedAfterPreemptionNotFailed) {
  const auto work = jobs(5, 30, 50, greedy());
  FakeModelRunner runner(400, 260);
  SchedulerRun run(runner, options(5));
  const auto together = run.all(work);
  EXPECT_GT(runner.no_kv_space_answers(), 0) << "the test never hit the runner's limit";
  expect_same_streams(together, alone(work));
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

// One request alone that cannot get room is an error for it, not a hang.
TEST(StepScheduler, ARequestAloneWithoutRoomFails) {
  FakeModelRunner runner(400, 40);
  SchedulerRun run(runner, options(2));
  const auto outcome = run.all(jobs(1, 30, 50, greedy()));
  EXPECT_EQ(outcome[0].reason, FinishReason::error);
  EXPECT_NE(outcome[0].error.find("KV cache is full"), std::string::npos) << outcome[0].error;
}

// A drain finishes every admitted request, preempted ones included.
TEST(StepScheduler, DrainFinishesPreemptedRequests) {
  const auto work = jobs(6, 20, 60, greedy());
  FakeModelRunner runner(200);
  runner.step_delay = std::chrono::microseconds(200);
  SchedulerRun run(runner, options(6));
  const auto drained = run.all(work, std::chrono::milliseconds(5));
  expect_same_streams(drained, alone(work));
  EXPECT_GT(run.metric("brisk_preemptions_total"), 0);
}

// The warm-up's steps and the served ones run on one thread, the engine's, and start() returns
// after the warm-up: ggml-cpu runs a step on an OpenMP team of its calling thread, and a second
// team (a warm-up on the caller's thread) made libgomp sleep at every barrier of every served
// step, 1.6x slower on 2 vCPUs.
TEST(StepScheduler, TheWarmUpAndEveryStepRunOnTheEngineThread) {
  FakeModelRunner runner(2048);
  SchedulerOptions opts = options(4, 256);
  opts.warm_up = true;
  ServingMetrics metrics;
  EngineLoop loop(runner, opts, metrics);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  runner.before_decode = [&](int) {
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  };
  loop.start();
  int warm_up_decodes = runner.decodes();
  EXPECT_GT(warm_up_decodes, 0) << "start() returned before the warm-up ran";
  std::condition_variable cv;
  bool finished = false;
  auto request = std::make_shared<Request>();
  request->prompt_tokens.assign(40, 5);
  request->max_tokens = 4;
  request->sampling = greedy();
  request->arrival = Clock::now();
  request->on_update = [&](GenerationUpdate&& update) {
    if (!update.finished()) return;
    std::lock_guard lock(mutex);
    finished = true;
    cv.notify_all();
  };
  ASSERT_EQ(loop.submit(std::move(request)), SubmitStatus::accepted);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return finished; }));
  EXPECT_GT(runner.decodes(), warm_up_decodes);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

// The step (counted in the fake's decodes) at which a short prompt that arrives while a long one
// is being prefilled gets its first token.
int short_first_token_step(int long_prefill_tokens, int* long_first_token_step) {
  FakeModelRunner runner(8192);
  SchedulerOptions opts = options(4, 256);
  opts.long_prefill_tokens = long_prefill_tokens;
  ServingMetrics metrics;
  EngineLoop scheduler(runner, opts, metrics);
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int> first_token_step(2, -1);
  int finished = 0;
  auto submit = [&](int index, int prompt_tokens) {
    auto request = std::make_shared<Request>();
    request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 5 + index);
    request->max_tokens = 4;
    request->sampling = greedy();
    request->arrival = Clock::now();
    request->on_update = [&, index](GenerationUpdate&& update) {
      std::lock_guard lock(mutex);
      if (first_token_step[index] < 0 && update.completion_tokens > 0) {
        first_token_step[index] = runner.decodes();
      }
      if (update.finished() && ++finished == 2) cv.notify_all();
    };
    EXPECT_EQ(scheduler.submit(std::move(request)), SubmitStatus::accepted);
  };
  // The short prompt arrives during the long one's second prefill step, whatever the machine.
  runner.before_decode = [&](int n) {
    if (n == 2) submit(1, 40);
  };
  submit(0, 2000);  // 8 steps of 256 tokens alone
  scheduler.start();
  std::unique_lock lock(mutex);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return finished == 2; }));
  *long_first_token_step = first_token_step[0];
  return first_token_step[1];
}

TEST(StepScheduler, ShortPromptsDoNotWaitForALongPrefill) {
  int long_step = 0;
  const int short_step = short_first_token_step(128, &long_step);
  EXPECT_LE(short_step, 5) << "the short prompt waited for the long one's prefill";
  EXPECT_LT(short_step, long_step);
  // Oldest first: the short one's first token comes after the long prompt's prefill.
  int long_step_fcfs = 0;
  const int short_step_fcfs = short_first_token_step(0, &long_step_fcfs);
  EXPECT_GE(short_step_fcfs, long_step_fcfs);
}

// Two long prompts and a short one queued, two sequences: the second long prompt would only hold
// a sequence while the first is prefilled, so the short one behind it takes that sequence.
TEST(StepScheduler, ShortPromptsOvertakeLongOnesWaitingForTheirTurn) {
  const std::vector<Job> work = {jobs(1, 2000, 4, greedy())[0], jobs(1, 2000, 4, greedy())[0],
                                 jobs(1, 40, 4, greedy())[0]};
  FakeModelRunner runner(8192);
  SchedulerOptions opts = options(2, 256);
  opts.long_prefill_tokens = 128;
  SchedulerRun run(runner, opts);
  std::vector<int> first_token_step(3, -1);
  const auto outcomes = run.all(work, std::chrono::milliseconds(-1), [&](size_t i) {
    if (first_token_step[i] < 0) first_token_step[i] = runner.decodes();
  });
  for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.reason, FinishReason::length);
  EXPECT_LE(first_token_step[2], 2) << "the short prompt waited behind a long one";
  EXPECT_LT(first_token_step[0], first_token_step[1]) << "long prompts keep their order";
}

// --target-itl-ms cuts prompt chunks while a long prompt is prefilled or while the prompts
// waiting fit in one step; a burst of short prompts larger than a step keeps the whole token
// budget (spreading it over small steps cost throughput).
// The scheduler acts (admits, makes room) before it plans, and planning reads the state only:
// planned twice, a step is the same plan, with no cell, sequence or decode touched; the step
// then runs what was planned.
TEST(StepScheduler, PlanningTwiceGivesTheSamePlanAndChangesNothing) {
  FakeModelRunner runner(256);
  SchedulerOptions opts = options(4, 32);
  opts.max_step_ms = 0;
  opts.prefix_cache.enabled = false;
  ServingMetrics metrics;
  StepScheduler scheduler(runner, opts, metrics);
  const auto request = [](int prompt_tokens, int max_tokens) {
    auto out = std::make_shared<Request>();
    out->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 7);
    out->max_tokens = max_tokens;
    out->sampling = greedy();
    out->on_update = [](GenerationUpdate&&) {};
    return out;
  };
  scheduler.enqueue(request(10, 50));
  scheduler.step();  // its prompt in: it decodes from now on
  scheduler.enqueue(request(100, 5));
  scheduler.step();  // admitted, with its first chunk

  const int cells = runner.cells_in_use();
  const int decodes = runner.decodes();
  const StepPlan first = scheduler.plan_preview();
  const StepPlan second = scheduler.plan_preview();
  ASSERT_EQ(first.decode_tokens(), 1);
  ASSERT_GT(first.tokens(), 1) << "a prompt chunk beside the decode";
  ASSERT_EQ(first.entries().size(), second.entries().size());
  for (size_t i = 0; i < first.entries().size(); ++i) {
    EXPECT_EQ(first.entries()[i].sequence, second.entries()[i].sequence);
    EXPECT_EQ(first.entries()[i].tokens, second.entries()[i].tokens);
    EXPECT_EQ(first.entries()[i].decode, second.entries()[i].decode);
  }
  EXPECT_EQ(runner.cells_in_use(), cells);
  EXPECT_EQ(runner.decodes(), decodes);

  scheduler.step();
  EXPECT_EQ(runner.cells_in_use(), cells + first.tokens()) << "the step ran another plan";
}

TEST(StepScheduler, StepTargetHoldsExceptForABurstOfShortPrompts) {
  enum class Arrival { long_prompt, one_short, burst };
  for (const Arrival arrival : {Arrival::long_prompt, Arrival::one_short, Arrival::burst}) {
    FakeModelRunner runner(16384);
    runner.step_delay = std::chrono::milliseconds(2);
    runner.token_delay = std::chrono::microseconds(100);
    SchedulerOptions opts = options(12, 512);
    opts.max_step_ms = 5;  // beside one decode, room for about 15 prompt tokens
    opts.long_prefill_tokens = 256;
    FakeClock clock;
    use_fake_clock(clock, runner, opts);
    ServingMetrics metrics;
    EngineLoop scheduler(runner, opts, metrics);
    std::mutex mutex;
    std::condition_variable cv;
    int finished = 0;
    const int total = arrival == Arrival::burst ? 9 : 2;
    auto submit = [&](int prompt_tokens, int max_tokens) {
      auto request = std::make_shared<Request>();
      request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 9);
      request->max_tokens = max_tokens;
      request->sampling = greedy();
      request->arrival = clock.now();
      request->on_update = [&](GenerationUpdate&& update) {
        std::lock_guard lock(mutex);
        if (update.finished() && ++finished == total) cv.notify_all();
      };
      EXPECT_EQ(scheduler.submit(std::move(request)), SubmitStatus::accepted);
    };
    // The others arrive while the first one decodes (its costs measured by then).
    runner.before_decode = [&](int n) {
      if (n != 4) return;
      runner.reset_max_batch();
      if (arrival == Arrival::long_prompt) submit(2000, 2);
      if (arrival == Arrival::one_short) submit(100, 2);
      if (arrival == Arrival::burst) {
        for (int i = 0; i < 8; ++i) submit(100, 2);
      }
    };
    submit(20, 600);
    scheduler.start();
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished == total; }));
    if (arrival == Arrival::burst) {
      EXPECT_GT(runner.max_batch(), 300) << "a burst of short prompts was cut to the target";
    } else {
      EXPECT_LT(runner.max_batch(), 60)
          << "a prompt's chunks ignored the step target (case " << static_cast<int>(arrival) << ")";
    }
  }
}

// A long prompt prefilled while nothing decodes, and short prompts arriving one per step from
// the engine's `first_short_step`th decode to its `last_short_step`th: the decode at which each
// request got its first token (index 0: a warm-up that measures the step costs, 1: the long
// one, then the short ones), and the most sequences one step carried.
struct LongAmongShorts {
  std::vector<int> first_token_step;
  int max_sequences_in_a_step = 0;
};
LongAmongShorts prefill_long_among_shorts(int long_tokens, int first_short_step,
                                          int last_short_step) {
  FakeModelRunner runner(16384);
  runner.step_delay = std::chrono::milliseconds(2);
  runner.token_delay = std::chrono::microseconds(100);
  SchedulerOptions opts = options(64, 512);
  opts.max_step_ms = 5;
  opts.long_prefill_tokens = 256;
  FakeClock clock;
  use_fake_clock(clock, runner, opts);
  ServingMetrics metrics;
  EngineLoop scheduler(runner, opts, metrics);
  std::mutex mutex;
  std::condition_variable cv;
  const int total = 2 + last_short_step - first_short_step + 1;
  LongAmongShorts result;
  result.first_token_step.assign(static_cast<size_t>(total), -1);
  int submitted = 0;
  int finished = 0;
  auto submit = [&](int prompt_tokens) {
    const int index = submitted++;
    auto request = std::make_shared<Request>();
    request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 7 + index % 50);
    request->max_tokens = 1;
    request->sampling = greedy();
    request->arrival = clock.now();
    request->on_update = [&, index](GenerationUpdate&& update) {
      std::lock_guard lock(mutex);
      auto& step = result.first_token_step[static_cast<size_t>(index)];
      if (step < 0 && update.completion_tokens > 0) step = runner.decodes();
      if (update.finished() && ++finished == total) cv.notify_all();
    };
    EXPECT_EQ(scheduler.submit(std::move(request)), SubmitStatus::accepted);
  };
  runner.before_decode = [&](int n) {
    if (n == 1) submit(long_tokens);
    if (n >= first_short_step && n <= last_short_step) submit(40);
  };
  submit(40);
  scheduler.start();
  std::unique_lock lock(mutex);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished == total; }));
  result.max_sequences_in_a_step = runner.max_sequences_in_a_step();
  return result;
}

// brisk doctor found short newcomers waiting ~80% of a 320-token prefill: a short one's step
// carried a long chunk that filled the step. Now it carries the short prompt alone.
TEST(StepScheduler, AShortNewcomersStepCarriesNoLongChunk) {
  const LongAmongShorts run = prefill_long_among_shorts(2000, 3, 3);
  EXPECT_LE(run.first_token_step[2], 4) << "the short newcomer waited for the long prompt";
  EXPECT_EQ(run.max_sequences_in_a_step, 1) << "a long chunk shared the short newcomer's step";
}

// The long chunk gives way to short prompts for one step, never two in a row: a short prompt
// arriving at every step does not starve it (it would wait for the last short otherwise).
TEST(StepScheduler, AStreamOfShortPromptsDoesNotStarveALongOne) {
  // Every other step the long prompt gets what the short one left of the step's budget: its
  // 2,000 tokens are in within ~10 steps, while the short prompts keep coming until step 200.
  const LongAmongShorts run = prefill_long_among_shorts(2000, 3, 200);
  EXPECT_LT(run.first_token_step[1], 150) << "the long prompt waited for the shorts to stop";
  for (size_t i = 2; i < run.first_token_step.size(); ++i) {
    EXPECT_LE(run.first_token_step[i], static_cast<int>(i) + 3) << "short " << i << " waited";
  }
}

// A request with `prompt_tokens` and `max_tokens` (named) that arrives now.
std::shared_ptr<Request> request_at(TimePoint now, int prompt_tokens, int max_tokens,
                                    UpdateSink on_update = [](GenerationUpdate&&) {}) {
  auto request = std::make_shared<Request>();
  request->prompt_tokens.assign(static_cast<size_t>(prompt_tokens), 3);
  request->max_tokens = max_tokens;
  request->max_tokens_named = true;
  request->sampling = greedy();
  request->ignore_eos = true;
  request->arrival = now;
  request->on_update = std::move(on_update);
  return request;
}

// Runs `loop` until `finished` says so; `act(n)` runs on the engine thread before decode n.
void run_until(EngineLoop& loop, FakeModelRunner& runner, std::function<void(int)> act,
               std::function<bool()> finished) {
  runner.before_decode = std::move(act);
  loop.start();
  for (int i = 0; i < 10000 && !finished(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(finished()) << "the scenario never finished";
  loop.shutdown(std::chrono::seconds(10));
}

// A request that would wait past --max-queue-delay-ms is refused at submit, with the estimate.
TEST(StepScheduler, RefusesWhatWouldWaitTooLong) {
  FakeModelRunner runner(100000);
  runner.step_delay = std::chrono::milliseconds(3);
  FakeClock clock;
  SchedulerOptions opts = options(1, 64);
  opts.max_queue_delay_ms = 50;
  use_fake_clock(clock, runner, opts);
  ServingMetrics metrics;
  EngineLoop loop(runner, opts, metrics);
  std::atomic<int> busy_tokens{0};
  auto busy = request_at(clock.now(), 8, 200,
                         [&](GenerationUpdate&& u) { busy_tokens = u.completion_tokens; });
  // Learn the costs first: 64-token prompt chunks at 3 ms a step; then one sequence, busy for
  // ~200 steps: requests behind it would wait ~600 ms.
  ASSERT_EQ(loop.submit(request_at(clock.now(), 640, 2,
                                   [&](GenerationUpdate&& u) {
                                     if (u.finished()) {
                                       busy->arrival = clock.now();
                                       EXPECT_EQ(loop.submit(busy), SubmitStatus::accepted);
                                     }
                                   })),
            SubmitStatus::accepted);
  std::atomic<bool> done{false};
  double wait_ms = 0;
  SubmitStatus status = SubmitStatus::accepted;
  run_until(
      loop, runner,
      [&](int) {
        if (busy_tokens < 3 || done) return;
        for (int i = 0; i < 50 && status == SubmitStatus::accepted; ++i) {
          status = loop.submit(request_at(clock.now(), 640, 1), &wait_ms);
        }
        busy->cancelled = true;
        done = true;
      },
      [&] { return done.load(); });
  EXPECT_EQ(status, SubmitStatus::queue_delay);
  EXPECT_GT(wait_ms, 50);
}

// Under load from a cold start nothing has finished, so no hold time is measured: a request
// that named its max_tokens is then expected to run them at the measured decode step, and a
// newcomer that would wait for its sequence longer than --max-queue-delay-ms is refused (with
// no estimate, overload admitted everything and admitted requests waited 3.4x the limit).
TEST(StepScheduler, BeforeAnythingFinishedTheWaitForASequenceComesFromMaxTokens) {
  for (const bool named : {true, false}) {
    FakeModelRunner runner(100000);
    runner.step_delay = std::chrono::milliseconds(3);
    FakeClock clock;
    SchedulerOptions opts = options(1, 64);
    opts.max_queue_delay_ms = 100;
    use_fake_clock(clock, runner, opts);
    ServingMetrics metrics;
    EngineLoop loop(runner, opts, metrics);
    auto busy = request_at(clock.now(), 8, 300);  // ~900 ms of 3 ms steps
    busy->max_tokens_named = named;
    ASSERT_EQ(loop.submit(busy), SubmitStatus::accepted);
    std::atomic<bool> done{false};
    double wait_ms = 0;
    SubmitStatus status = SubmitStatus::accepted;
    run_until(
        loop, runner,
        [&](int n) {
          if (n != 22) return;  // 20 tokens in
          status = loop.submit(request_at(clock.now(), 8, 1), &wait_ms);
          busy->cancelled = true;
          done = true;
        },
        [&] { return done.load(); });
    if (named) {
      EXPECT_EQ(status, SubmitStatus::queue_delay) << "estimated " << wait_ms << " ms";
      EXPECT_GT(wait_ms, 100) << "past the limit (the forecast stops a little after it)";
    } else {
      EXPECT_EQ(status, SubmitStatus::accepted) << "a request without max_tokens was guessed at";
    }
  }
}

// A new server's first decode step can be several times slower than the next ones (buffers
// faulted in). Priced into a running request's remaining max_tokens, that one sample refused
// requests that would have waited a second (CI: test_prometheus's queued requests behind a
// 600-token stream); the cold-start estimate waits until the decode cost has settled.
TEST(StepScheduler, OneSlowFirstStepRefusesNobody) {
  FakeModelRunner runner(100000);
  runner.step_delay = std::chrono::milliseconds(3);
  FakeClock clock;
  SchedulerOptions opts = options(1, 64);
  opts.max_queue_delay_ms = 5000;  // the stream below holds its sequence ~1 s
  use_fake_clock(clock, runner, opts);
  ServingMetrics metrics;
  EngineLoop loop(runner, opts, metrics);
  auto busy = request_at(clock.now(), 8, 300);
  ASSERT_EQ(loop.submit(busy), SubmitStatus::accepted);
  std::atomic<bool> done{false};
  std::vector<SubmitStatus> statuses;
  std::vector<double> waits(2, 0);
  run_until(
      loop, runner,
      [&](int n) {
        if (n == 2) clock.advance(std::chrono::milliseconds(300));  // the slow first decode
        if (n != 5) return;  // 3 tokens in
        for (size_t i = 0; i < 2; ++i) {
          statuses.push_back(loop.submit(request_at(clock.now(), 8, 4), &waits[i]));
        }
        busy->cancelled = true;
        done = true;
      },
      [&] { return done.load(); });
  ASSERT_EQ(statuses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(statuses[i], SubmitStatus::accepted)
        << "newcomer " << i << " refused on an estimated " << waits[i] << " ms";
  }
}

// Driven a step at a time on a fake clock: a request whose deadline passes while it waits for
// the only sequence is dropped with FinishReason::deadline, never computed, and its timings are
// the clock's to the microsecond.
TEST(StepScheduler, ADeadlinePassedInTheQueueDropsTheRequestUncomputed) {
  SteppedScheduler run(options(1));
  run.submit(0, 20, 100);  // holds the only sequence for 100 steps
  run.submit(1, 20, 10, 0, /*deadline_ms=*/50);
  run.step();
  run.advance(std::chrono::milliseconds(49));
  run.step();
  EXPECT_FALSE(run.outcome(1).finished()) << "dropped before its deadline";
  run.advance(std::chrono::milliseconds(2));
  run.step();
  const GenerationUpdate dropped = run.outcome(1);
  EXPECT_EQ(dropped.finish_reason, FinishReason::deadline);
  EXPECT_EQ(dropped.completion_tokens, 0);
  EXPECT_DOUBLE_EQ(dropped.timings.queue_ms, 51.0);
  EXPECT_EQ(run.runner().max_sequences_in_a_step(), 1) << "the dropped request was computed";
  EXPECT_FALSE(run.outcome(0).finished());
}

// GET /debug/scheduler says why each waiting request is not running.
std::map<uint64_t, std::string> waiting_reasons(const SchedulerSnapshot& snapshot) {
  std::map<uint64_t, std::string> out;
  for (const WaitingView& waiting : snapshot.waiting) {
    out[waiting.id] = wait_reason_name(waiting.reason);
  }
  for (const SequenceView& preempted : snapshot.preempted) {
    out[preempted.id] = wait_reason_name(preempted.waiting_reason);
  }
  return out;
}

TEST(StepSchedulerWaitingReasons, EveryRequestWaitsForAFreeSequence) {
  SteppedScheduler run(options(1));
  for (uint64_t id = 0; id < 3; ++id) run.submit(id, 20, 10);
  run.step();
  EXPECT_EQ(run.snapshot().admission_blocked, AdmissionBlock::no_free_sequence);
  const std::map<uint64_t, std::string> want = {{1, "no_free_sequence"}, {2, "no_free_sequence"}};
  EXPECT_EQ(waiting_reasons(run.snapshot()), want);
}

// The request that does not fit waits for room; the small one behind it does not overtake it.
TEST(StepSchedulerWaitingReasons, TheNextWaitsForRoomAndTheRestBehindIt) {
  SteppedScheduler run(options(4, 512), /*context=*/200);
  run.submit(0, 150, 40);
  run.submit(1, 100, 4);
  run.submit(2, 10, 4);
  run.step();
  EXPECT_EQ(run.snapshot().admission_blocked, AdmissionBlock::kv_cache_full);
  const std::map<uint64_t, std::string> want = {{1, "kv_cache_full"}, {2, "behind_others"}};
  EXPECT_EQ(waiting_reasons(run.snapshot()), want);
}

TEST(StepSchedulerWaitingReasons, ALongPromptWaitsForItsTurnAndOthersForTheBudget) {
  SchedulerOptions opts = options(4, 64);
  opts.long_prefill_tokens = 16;
  SteppedScheduler run(opts);
  run.submit(0, 100, 4);  // long: prefilled first
  run.submit(1, 100, 4);  // long: waits for the first
  run.step();
  EXPECT_EQ(waiting_reasons(run.snapshot()),
            (std::map<uint64_t, std::string>{{1, "long_prefill_turn"}}));

  SteppedScheduler busy(options(4, 64));  // no long prompts: the first takes the whole budget
  busy.submit(0, 100, 4);
  busy.submit(1, 10, 4);
  busy.step();
  EXPECT_EQ(waiting_reasons(busy.snapshot()),
            (std::map<uint64_t, std::string>{{1, "step_budget"}}));
}

// A request the engine thread has not seen yet (submitted during a step) says so.
TEST(StepSchedulerWaitingReasons, ARequestSubmittedSinceTheLastStepIsNotYetConsidered) {
  FakeModelRunner runner(4096);
  ServingMetrics metrics;
  EngineLoop loop(runner, options(1), metrics);  // not started: nothing is handed over
  auto request = std::make_shared<Request>();
  request->id = 7;
  request->prompt_tokens.assign(8, 3);
  request->max_tokens = 1;
  request->arrival = Clock::now();
  request->on_update = [](GenerationUpdate&&) {};
  ASSERT_EQ(loop.submit(request), SubmitStatus::accepted);
  const SchedulerSnapshot snapshot = loop.snapshot();
  EXPECT_EQ(snapshot.waiting_total, 1);
  EXPECT_EQ(waiting_reasons(snapshot),
            (std::map<uint64_t, std::string>{{7, "not_yet_considered"}}));
}

// Preempted for room: the preempted request waits for room, ahead of the queue.
TEST(StepSchedulerWaitingReasons, APreemptedRequestWaitsForRoom) {
  SteppedScheduler run(options(2), /*context=*/100);
  run.submit(0, 20, 60);
  run.submit(1, 20, 60);
  for (int i = 0; i < 80 && run.snapshot().preempted.empty(); ++i) run.step();
  ASSERT_EQ(run.snapshot().preempted.size(), 1u) << "the cache never ran out";
  EXPECT_EQ(waiting_reasons(run.snapshot()),
            (std::map<uint64_t, std::string>{{1, "kv_cache_full"}}));
}

}  // namespace
}  // namespace brisk
