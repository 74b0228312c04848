// The scheduler on a fake model (fake_model_runner.h): KV accounted as used, preemption and
// recompute, retries when the runner finds no KV room, and the drain.

#include "sched/step_scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "fake_model_runner.h"

namespace brisk {
namespace {

using testing::FakeModelRunner;

struct Outcome {
  std::string text;
  int completion_tokens = 0;
  FinishReason reason = FinishReason::none;
  std::string error;
};

struct Job {
  TokenList prompt;
  int max_tokens = 0;
  SamplingParams sampling;
};

// Submits every job at once and waits until all have finished.
class SchedulerRun {
 public:
  SchedulerRun(FakeModelRunner& runner, SchedulerOptions options)
      : scheduler_(runner, options, metrics_) {}

  std::vector<Outcome> all(const std::vector<Job>& jobs,
                           std::chrono::milliseconds drain_after = std::chrono::milliseconds(-1)) {
    outcomes_.assign(jobs.size(), Outcome{});
    remaining_ = static_cast<int>(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      auto request = std::make_shared<Request>();
      request->id = i;
      request->prompt_tokens = jobs[i].prompt;
      request->max_tokens = jobs[i].max_tokens;
      request->sampling = jobs[i].sampling;
      request->arrival = Clock::now();
      request->on_update = [this, i](GenerationUpdate&& update) {
        std::lock_guard lock(mutex_);
        Outcome& outcome = outcomes_[i];
        outcome.text += update.text;
        outcome.completion_tokens = update.completion_tokens;
        if (update.finished()) {
          outcome.reason = update.finish_reason;
          outcome.error = update.error;
          if (--remaining_ == 0) done_.notify_all();
        }
      };
      EXPECT_EQ(scheduler_.submit(std::move(request)), SubmitStatus::accepted);
    }
    scheduler_.start();
    if (drain_after.count() >= 0) {
      std::this_thread::sleep_for(drain_after);
      scheduler_.shutdown(std::chrono::seconds(60));  // returns once the drain is over
    }
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(done_.wait_for(lock, std::chrono::seconds(60), [&] { return remaining_ == 0; }))
        << remaining_ << " requests never finished";
    return outcomes_;
  }

  double metric(const std::string& name) const {
    const std::string text = metrics_.render_prometheus(scheduler_.stats());
    std::smatch match;
    EXPECT_TRUE(std::regex_search(text, match, std::regex("\n" + name + " ([0-9.e+-]+)\n")))
        << name << " not in\n" << text;
    return match.empty() ? -1 : std::stod(match[1]);
  }
  SchedulerStats stats() const { return scheduler_.stats(); }

 private:
  ServingMetrics metrics_;
  StepScheduler scheduler_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<Outcome> outcomes_;
  int remaining_ = 0;
};

std::vector<Job> jobs(int count, int prompt_tokens, int max_tokens, SamplingParams sampling) {
  std::vector<Job> out;
  for (int i = 0; i < count; ++i) {
    Job job;
    job.prompt.resize(static_cast<size_t>(prompt_tokens + 3 * i));
    std::iota(job.prompt.begin(), job.prompt.end(), 1 + 7 * i);
    job.max_tokens = max_tokens;
    job.sampling = sampling;
    out.push_back(job);
  }
  return out;
}

SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0;
  return params;
}

SamplingParams seeded(uint32_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

SchedulerOptions options(int max_seqs, int max_batched_tokens = 64) {
  SchedulerOptions out;
  out.max_seqs = max_seqs;
  out.max_batched_tokens = max_batched_tokens;
  out.max_queued_requests = 64;
  return out;
}

// Each job on its own, with all the room it wants: what a request generates undisturbed.
std::vector<Outcome> alone(const std::vector<Job>& all_jobs) {
  std::vector<Outcome> out;
  for (const Job& job : all_jobs) {
    FakeModelRunner runner(100000);
    SchedulerRun run(runner, options(1));
    out.push_back(run.all({job})[0]);
  }
  return out;
}

void expect_same_streams(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].reason, want[i].reason) << "request " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].completion_tokens, want[i].completion_tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
  }
}

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
    EXPECT_EQ(runner.cells_in_use(), 0);
    EXPECT_EQ(run.stats().waiting, 0);
    EXPECT_EQ(run.stats().preempted, 0);
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

// The step (counted in the fake's decodes) at which a short prompt that arrives while a long one
// is being prefilled gets its first token.
int short_first_token_step(int long_prefill_tokens, int* long_first_token_step) {
  FakeModelRunner runner(8192);
  runner.step_delay = std::chrono::milliseconds(2);
  SchedulerOptions opts = options(4, 256);
  opts.long_prefill_tokens = long_prefill_tokens;
  ServingMetrics metrics;
  StepScheduler scheduler(runner, opts, metrics);
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
  submit(0, 2000);  // 8 steps of 256 tokens alone
  scheduler.start();
  while (runner.decodes() < 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
  submit(1, 40);
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

}  // namespace
}  // namespace brisk
