#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "sched/device_arbiter.h"
#include "sched/request.h"
#include "sched/scheduler_snapshot.h"
#include "sched/serving_metrics.h"
#include "sched/step_scheduler.h"
#include "sched/wait_forecast.h"

namespace brisk {

enum class SubmitStatus { accepted, queue_full, queue_delay, queued_tokens_full, shutting_down };

// The engine thread and what feeds it: requests submitted from any thread wait here until the
// engine thread hands them to the StepScheduler at the start of a step; the scheduler's reports
// are kept for stats(), snapshot() and submit()'s estimate. The drain is decided on the engine
// thread, which alone knows whether a request is between the queue and the running set.
class EngineLoop {
 public:
  EngineLoop(ModelRunner& engine, SchedulerOptions options, ServingMetrics& metrics);
  ~EngineLoop();

  // With several models on one device: every step first takes a turn of `arbiter` as
  // `tenant`. Before start().
  void share_device(DeviceArbiter& arbiter, DeviceArbiter::TenantId tenant);
  // Starts the engine thread and returns once it has measured the step costs (the warm-up):
  // every llama_decode of the model runs on that one thread.
  void start();
  // Any thread. Refuses at once when the queue is full, or when the request's first token would
  // come more than max_queue_delay_ms later than its own prompt's compute alone takes (the
  // forecast of sched/wait_forecast.h), instead of letting latency grow; `estimated_wait_ms`
  // (optional) receives the forecast when it refuses for it.
  SubmitStatus submit(std::shared_ptr<Request> request, double* estimated_wait_ms = nullptr);
  // The choices of one response (n > 1, prompt lists), all accepted or all refused: a client
  // gets every choice it asked for or a 429, never part of them.
  SubmitStatus submit_all(std::vector<std::shared_ptr<Request>> requests,
                          double* estimated_wait_ms = nullptr);
  // What submit() would answer a request now, before it is parsed or tokenized: a refusal
  // that does not depend on the request's own prompt (a full queue, a wait past
  // --max-queue-delay-ms) costs a lock, not a chat template and a tokenizer (an overloaded
  // server's clients resend at once). submit() checks again with the prompt.
  SubmitStatus precheck(double* estimated_wait_ms) const;
  // Any thread: makes the engine thread look at cancelled flags now.
  void wake();
  // Stops admitting, lets in-flight work finish for up to `drain_timeout`, cancels the rest and
  // joins the engine thread. A later call may only shorten the drain.
  void shutdown(std::chrono::milliseconds drain_timeout);

  SchedulerStats stats() const;
  // Any thread: the running set and KV map as of the last step, and the queue.
  SchedulerSnapshot snapshot() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  // submit()'s checks, with admission_mutex_ held: the queue's limits, then the newcomer's
  // forecast wait (sched/wait_forecast.h) against --max-queue-delay-ms; `prompt_tokens` of
  // all its choices (0: not known yet, the precheck).
  SubmitStatus check_wait(const Newcomer& newcomer, int prompt_tokens,
                          double* estimated_wait_ms) const;
  // The step costs measured before the first request (options.warm_up), on the engine thread.
  void warm_up();
  void run();
  bool wait_for_work(std::optional<DeviceArbiter::Turn>& turn);
  void receive(SchedulerReport&& report);

  const SchedulerOptions options_;
  const WaitForecastOptions forecast_options_;
  StepScheduler scheduler_;  // engine thread only

  // Taken by one admission at a time, before mutex_ and never inside it.
  mutable std::mutex admission_mutex_;
  // Guarded by admission_mutex_: the state a forecast last started from, and the forecast
  // with a one-token newcomer: what it would wait, and what the requests ahead would without a
  // real newcomer among them.
  struct ForecastMemo {
    uint64_t version = ~uint64_t{0};
    LiveLoad load;
    std::vector<ForecastRequest> submitted;
    WaitForecast base;
  };
  mutable ForecastMemo forecast_memo_;

  mutable std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<std::shared_ptr<Request>> submitted_;  // guarded by mutex_: not handed over yet
  int submitted_prompt_tokens_ = 0;                 // guarded by mutex_
  // Guarded by mutex_: the scheduler's last report. Requests handed over are counted in it in
  // the same critical section that takes them out of submitted_, so stats() never sees a
  // request nowhere.
  SchedulerReport report_;
  // Guarded by mutex_: moves whenever what a forecast starts from does (a report, a hand-over,
  // an admission).
  uint64_t state_version_ = 0;
  bool accepting_ = true;      // guarded by mutex_
  bool draining_ = false;      // guarded by mutex_
  TimePoint drain_deadline_;   // guarded by mutex_
  bool wake_pending_ = false;  // guarded by mutex_

  DeviceArbiter* arbiter_ = nullptr;  // null: the device is this model's alone
  DeviceArbiter::TenantId tenant_ = -1;

  std::thread engine_thread_;
};

}  // namespace brisk
