#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "sched/cost_warmup.h"
#include "sched/kv_manager.h"
#include "sched/live_load.h"
#include "sched/queue_policy.h"
#include "sched/request.h"
#include "sched/scheduler_options.h"
#include "sched/scheduler_snapshot.h"
#include "sched/sequence.h"
#include "sched/serving_metrics.h"
#include "sched/step_costs.h"
#include "sched/step_executor.h"
#include "sched/step_plan.h"
#include "sched/step_planner.h"

namespace brisk {

// What the engine thread tells the other threads after a step (and after admitting requests):
// counts for stats(), the load for submit()'s estimate, the picture for GET /debug/scheduler.
struct SchedulerReport {
  int running = 0;
  int preempted = 0;
  int waiting = 0;  // handed to the scheduler and not admitted yet
  int waiting_prompt_tokens = 0;
  int kv_running_cells = 0;
  int prefix_cache_cells = 0;
  int prefix_cache_sequences = 0;
  LiveLoad load;
  SchedulerSnapshot snapshot;
};

// The serving step, on the engine thread only (the engine loop, sched/engine_loop.h, owns the
// thread and the queue that feeds it), as nano-vllm's schedule() -> run() -> postprocess():
// the StepPlanner (sched/step_planner.h) turns the state into one StepDecision without acting;
// the scheduler applies it (the KvManager runs its KV operations, sequences are preempted and
// admitted); the StepExecutor (sched/step_executor.h) runs its batch on the model, commits it
// and samples the next tokens; finished requests then release their sequences. Requests join
// and leave between steps (continuous batching).
//
// KV is counted as it is used, not reserved for max_tokens: a request starts when its prompt
// fits beside the cells the running ones hold (or will hold once their prompts are in), so a
// request without max_tokens runs beside others. When the running ones grow out of the cache,
// or llama_decode finds no room, the latest-arrived is preempted: it gives up its cells and
// later recomputes them (Sequence::preempt), ahead of every request still waiting.
class StepScheduler {
 public:
  using ReportSink = std::function<void(SchedulerReport&&)>;

  StepScheduler(ModelRunner& engine, SchedulerOptions options, ServingMetrics& metrics,
                ReportSink report = nullptr);

  // Before the first request: measures what steps cost here and publishes it, so the first
  // admissions price their waits (sched/cost_warmup.h).
  WarmupResult warm_up();
  // Takes `table` as the costs learned so far, settled: a simulation of a server that has been
  // running (sched/wait_forecast.h) starts where that server is.
  void adopt_step_costs(const StepCostTable& table);
  // A submitted request joins the waiting ones (in arrival order).
  void enqueue(std::shared_ptr<Request> request);
  // One engine step: reap, decide, apply, run (decode, sample), release.
  void step();
  // Nothing running, preempted or waiting.
  bool idle() const {
    return state_.running.empty() && state_.preempted.empty() && state_.waiting.empty();
  }
  // The drain is over: every request still here ends as cancelled.
  void cancel_all();
  // A step that threw (out of memory, a bug) ends the requests it was running, never the server.
  void fail_running(const std::string& what);

  // The next step's decision from the state as it is, acting on nothing.
  StepDecision decide(StepPlanner::Start start = StepPlanner::Start::step) const;
  StepPlan plan_preview() const { return decide().plan; }

  const SchedulerOptions& options() const { return options_; }
  // Any thread.
  int kv_capacity_cells() const { return planner_.kv_shape().capacity_cells; }

 private:
  TimePoint now() const { return options_.clock(); }
  void reap_cancelled();
  // The decision's acts, in order: the KV operations, the preemptions, the admissions; then its
  // plan becomes the step's.
  void apply(StepDecision& decision);
  void preempt(uint64_t order, const std::vector<int>& saved_ids);
  void admit(const StepDecision::Admission& admission, std::shared_ptr<Request> request,
             const std::vector<int>& failed_restores);
  void release_finished();
  void fail_batch(const std::string& error);
  void finish_unscheduled(Request& request, FinishReason reason, std::string error = {});
  static std::string deadline_message(const Request& request);
  void report();
  LiveLoad live_load() const;
  SchedulerSnapshot describe() const;
  WaitReason wait_reason(const Request& request, bool preempted) const;

  ModelRunner& engine_;
  const SchedulerOptions options_;
  ServingMetrics& metrics_;
  const ReportSink report_;
  const StepPlanner planner_;  // with the KV cache's shape: capacity, watermark, one buffer or not

  SchedulerState state_;
  KvManager kv_;
  const PrefixFinder find_prefix_;  // the KV manager's lookup, in the planner's ledger
  StepPlan plan_;  // the step's, while the executor runs it
  StepCosts costs_;
  // What finished requests generated, a moving average (0 until one finished): how long a
  // request that names no max_tokens is expected to run.
  double mean_output_tokens_ = 0;
  StepExecutor executor_;  // runs each step's plan on the engine
  AdmissionPass last_pass_;  // the last admission pass: why it stopped
};

}  // namespace brisk
