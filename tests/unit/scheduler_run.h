#pragma once

// A harness for the scheduler's tests: jobs submitted to an EngineLoop on a FakeModelRunner,
// and what each stream received.

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "fake_model_runner.h"
#include "fake_clock.h"
#include "sched/engine_loop.h"
#include "sched/step_scheduler.h"

namespace brisk::testing {

struct Outcome {
  std::string text;
  int completion_tokens = 0;
  FinishReason reason = FinishReason::none;
  std::string error;
  int cached_prompt_tokens = 0;
  int finish_order = -1;  // 0 for the first request to finish, 1 for the next...
};

struct Job {
  TokenList prompt;
  int max_tokens = 0;
  SamplingParams sampling;
  int priority = 0;
  double deadline_ms = 0;
  int submit_before_decode = 0;  // all(): submitted on the engine thread before decode n (0: at once)
  int shares_prompt_of = -1;  // all(): a later choice (n > 1) of the job at this index, submitted before it
};

// An EngineLoop (and its StepScheduler) on a fake runner, and what each request's stream received.
class SchedulerRun {
 public:
  SchedulerRun(FakeModelRunner& runner, SchedulerOptions options)
      : runner_(runner), clock_(options.clock), scheduler_(runner, options, metrics_) {}

  // Submits every job at once and waits until all have finished. `on_token(i)` runs on the
  // engine thread with each update of request i that carries tokens.
  std::vector<Outcome> all(const std::vector<Job>& jobs,
                           std::chrono::milliseconds drain_after = std::chrono::milliseconds(-1),
                           std::function<void(size_t)> on_token = nullptr) {
    outcomes_.assign(jobs.size(), Outcome{});
    requests_.assign(jobs.size(), nullptr);
    remaining_ = static_cast<int>(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].submit_before_decode == 0) submit(i, jobs[i], on_token);
    }
    if (std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.submit_before_decode > 0; })) {
      runner_.before_decode = [this, jobs, on_token](int n) {
        for (size_t i = 0; i < jobs.size(); ++i) {
          if (jobs[i].submit_before_decode == n) submit(i, jobs[i], on_token);
        }
      };
    }
    scheduler_.start();
    if (drain_after.count() >= 0) {
      std::this_thread::sleep_for(drain_after);
      scheduler_.shutdown(std::chrono::seconds(60));  // returns once the drain is over
    }
    wait_for_all();
    return outcomes_;
  }

  // Each job submitted once the one before it has finished; `make_job(i, outcomes)` may build
  // job i from what the earlier ones generated (a multi-turn chat).
  std::vector<Outcome> one_by_one(
      int count, const std::function<Job(size_t, const std::vector<Outcome>&)>& make_job) {
    outcomes_.assign(static_cast<size_t>(count), Outcome{});
    scheduler_.start();
    for (size_t i = 0; i < outcomes_.size(); ++i) {
      std::vector<Outcome> so_far;
      {
        std::lock_guard lock(mutex_);
        remaining_ = 1;
        so_far = outcomes_;
      }
      submit(i, make_job(i, so_far), nullptr);
      wait_for_all();
    }
    return outcomes_;
  }

  double metric(const std::string& name) const {
    const std::string text = metrics_.render_prometheus(scheduler_.stats());
    std::smatch match;
    const std::string escaped = std::regex_replace(name, std::regex(R"([{}"\[\]().*+?^$|\\])"), R"(\$&)");
    EXPECT_TRUE(std::regex_search(text, match, std::regex("\n" + escaped + " ([0-9.e+-]+)\n")))
        << name << " not in\n" << text;
    return match.empty() ? -1 : std::stod(match[1]);
  }
  SchedulerStats stats() const { return scheduler_.stats(); }

 private:
  void submit(size_t i, const Job& job, std::function<void(size_t)> on_token) {
    auto request = std::make_shared<Request>();
    request->id = i;
    request->prompt_tokens = job.prompt;
    request->max_tokens = job.max_tokens;
    request->sampling = job.sampling;
    request->priority = job.priority;
    request->deadline_ms = job.deadline_ms;
    request->arrival = clock_();
    if (job.shares_prompt_of >= 0) {
      request->shares_prompt_of = requests_.at(static_cast<size_t>(job.shares_prompt_of));
    }
    if (i < requests_.size()) requests_[i] = request;
    request->on_update = [this, i, on_token](GenerationUpdate&& update) {
      if (on_token && update.completion_tokens > 0) on_token(i);
      std::lock_guard lock(mutex_);
      Outcome& outcome = outcomes_[i];
      outcome.text += update.text;
      outcome.completion_tokens = update.completion_tokens;
      if (update.finished()) {
        outcome.reason = update.finish_reason;
        outcome.error = update.error;
        outcome.cached_prompt_tokens = update.timings.cached_prompt_tokens;
        outcome.finish_order = finished_++;
        if (--remaining_ == 0) done_.notify_all();
      }
    };
    EXPECT_EQ(scheduler_.submit(std::move(request)), SubmitStatus::accepted);
  }

  void wait_for_all() {
    std::unique_lock lock(mutex_);
    EXPECT_TRUE(done_.wait_for(lock, std::chrono::seconds(60), [&] { return remaining_ == 0; }))
        << remaining_ << " requests never finished";
    lock.unlock();
    // A stream hears its end before the engine thread releases its sequence and publishes
    // the gauges; the running count is published last.
    for (int i = 0; i < 5000 && scheduler_.stats().running > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  FakeModelRunner& runner_;
  const std::function<TimePoint()> clock_;
  ServingMetrics metrics_;
  EngineLoop scheduler_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<Outcome> outcomes_;
  std::vector<std::shared_ptr<Request>> requests_;  // all(): by job, for shares_prompt_of
  int remaining_ = 0;
  int finished_ = 0;
};

// The scheduler alone on the test's thread, one step per call, on a fake clock that moves only
// when the test advances it: no engine thread, no sleeping.
class SteppedScheduler {
 public:
  explicit SteppedScheduler(SchedulerOptions options, int context = 4096)
      : runner_(context),
        scheduler_(runner_, with_clock(std::move(options)), metrics_,
                   [this](SchedulerReport&& report) { report_ = std::move(report); }) {}

  // Request `id` arrives now with a prompt of `prompt_tokens` distinct tokens.
  void submit(uint64_t id, int prompt_tokens, int max_tokens, int priority = 0,
              double deadline_ms = 0) {
    auto request = std::make_shared<Request>();
    request->id = id;
    request->prompt_tokens.resize(static_cast<size_t>(prompt_tokens));
    std::iota(request->prompt_tokens.begin(), request->prompt_tokens.end(),
              static_cast<Token>(1 + 11 * id));
    request->max_tokens = max_tokens;
    request->sampling.temperature = 0;
    request->ignore_eos = true;
    request->priority = priority;
    request->deadline_ms = deadline_ms;
    request->arrival = clock_.now();
    request->on_update = [this, id](GenerationUpdate&& update) {
      GenerationUpdate& last = updates_[id];
      const std::string text = last.text + update.text;
      last = std::move(update);
      last.text = text;
    };
    requests_[id] = request;
    scheduler_.enqueue(std::move(request));
  }
  // Request `id` arrives now as a later choice (n > 1) of request `first`: its prompt and limits.
  void submit_choice(uint64_t id, uint64_t first) {
    const Request& leader = *requests_.at(first);
    submit(id, static_cast<int>(leader.prompt_tokens.size()), leader.max_tokens, leader.priority,
           leader.deadline_ms);
    requests_[id]->prompt_tokens = leader.prompt_tokens;
    requests_[id]->shares_prompt_of = requests_.at(first);
  }
  void step() { scheduler_.step(); }
  void advance(Clock::duration by) { clock_.advance(by); }

  // What request `id` has received so far (its final update once it finished).
  GenerationUpdate outcome(uint64_t id) const {
    auto it = updates_.find(id);
    return it == updates_.end() ? GenerationUpdate{} : it->second;
  }
  const FakeModelRunner& runner() const { return runner_; }
  // What the scheduler last reported for GET /debug/scheduler.
  const SchedulerSnapshot& snapshot() const { return report_.snapshot; }

 private:
  SchedulerOptions with_clock(SchedulerOptions options) {
    options.clock = clock_.function();
    return options;
  }

  FakeClock clock_;
  FakeModelRunner runner_;
  ServingMetrics metrics_;
  StepScheduler scheduler_;
  std::map<uint64_t, GenerationUpdate> updates_;
  std::map<uint64_t, std::shared_ptr<Request>> requests_;
  SchedulerReport report_;
};

inline std::vector<Job> jobs(int count, int prompt_tokens, int max_tokens, SamplingParams sampling) {
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

inline SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0;
  return params;
}

inline SamplingParams seeded(uint32_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

// Decodes advance `clock` by the runner's delays, and the scheduler reads it.
inline void use_fake_clock(FakeClock& clock, FakeModelRunner& runner, SchedulerOptions& options) {
  runner.clock = &clock;
  options.clock = clock.function();
}

inline SchedulerOptions options(int max_seqs, int max_batched_tokens = 64) {
  SchedulerOptions out;
  out.max_seqs = max_seqs;
  out.max_batched_tokens = max_batched_tokens;
  out.max_queued_requests = 64;
  return out;
}

// Each job on its own, with all the room it wants: what a request generates undisturbed.
inline std::vector<Outcome> alone(const std::vector<Job>& all_jobs) {
  std::vector<Outcome> out;
  for (Job job : all_jobs) {
    FakeModelRunner runner(100000);
    SchedulerRun run(runner, options(1));
    job.submit_before_decode = 0;
    out.push_back(run.all({job})[0]);
  }
  return out;
}

inline void expect_same_streams(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].reason, want[i].reason) << "request " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].completion_tokens, want[i].completion_tokens) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
  }
}

}  // namespace brisk::testing
