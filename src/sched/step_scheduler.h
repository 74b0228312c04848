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
#include "sched/scheduler_snapshot.h"
#include "sched/sequence.h"
#include "sched/serving_metrics.h"
#include "sched/step_costs.h"
#include "sched/step_executor.h"
#include "sched/step_plan.h"

namespace brisk {

struct SchedulerOptions {
  int max_seqs = 16;             // running sequences at once
  int max_batched_tokens = 512;  // tokens per engine step (decodes first, then prefill chunks)
  int max_queued_requests = 64;  // waiting requests before new ones are refused
  // A request whose estimated wait before its prompt starts is longer than this is refused at
  // once (429 with Retry-After) instead of waiting; estimated from the work ahead of it and the
  // measured step costs (0: off).
  double max_queue_delay_ms = 30000;
  // Prompt tokens waiting in the queue beyond which new requests are refused (0: no limit).
  int max_queued_tokens = 0;
  // While streams are decoding, prompt chunks are cut so one step stays under this many ms
  // (0: only max_batched_tokens limits them). Trades a later first token for newcomers
  // against smaller inter-token stalls for running streams.
  double max_step_ms = 150;
  // A step that carries prompt tokens carries at least this many tokens in all (decodes
  // included) when the prompts have them, whatever max_step_ms says: ggml's CPU flash attention
  // takes its tiled path from 64 query rows (GGML_FA_TILE_Q) and below it a per-row path that
  // costs several times more per prompt token. 1 (no floor) by default: 64 bought throughput
  // and first tokens at twice the p99 inter-token gap (docs/scheduling.md, "Chunk sizes").
  int min_prefill_step_tokens = 1;
  // A long prompt's chunk in a step that carries no decodes has at least this many tokens (when
  // the prompt has them), whatever max_step_ms says: no stream's gap is at stake, only how long
  // a newcomer waits for the step. brisk serve sets ggml-cpu's 64 (kTiledAttentionRows) where
  // attention runs on the CPU: below it every row takes the per-row kernel over its sequence's
  // whole context, and a 3,790-token prompt alone took 35 s in 16-30-token chunks against 21 s
  // in 512-token ones (docs/scheduling.md, "Chunk sizes"). 0: the target alone decides.
  int min_alone_chunk_tokens = 0;
  // A prompt with more than this many tokens still to prefill is long: short prompts get a
  // step's budget first, so one long prompt does not hold back every short one behind it
  // (0: no distinction, oldest first). At most max_long_prefills long prompts progress at once.
  int long_prefill_tokens = 256;
  int max_long_prefills = 1;
  // Threads that sample a step's sequences in parallel, the engine thread included.
  int sampling_threads = 1;
  // Finished requests' KV cells kept for prompts that start the same way (docs/scheduling.md).
  PrefixCacheOptions prefix_cache;
  // Which waiting request starts next (--policy).
  QueuePolicyOptions queue_policy;
  // EngineLoop::start() measures the step costs before the first request
  // (sched/cost_warmup.h). brisk serve does (--warmup); off, the costs are learned from the
  // requests and a cold server's first waits are unpriced. Off here, so a test's fake steps
  // are its own.
  bool warm_up = false;
  // The time of every deadline, wait, hold and step cost the scheduler measures; tests drive a
  // fake one (the drain's timeout stays on the steady clock).
  std::function<TimePoint()> clock = Clock::now;
  // Logs no step, admission or preemption: a simulation's scheduler (sched/serve_simulation.h;
  // admission runs one per request) is not the server's.
  bool quiet = false;
};

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

// The per-step policy, on the engine thread only (the engine loop, sched/engine_loop.h, owns
// the thread and the queue that feeds it). Each step plans the next token of every running
// sequence and, with the rest of the token budget, prompt chunks (chunked prefill); the
// StepExecutor (sched/step_executor.h) runs the plan on the model, commits it and samples the
// next tokens. Requests join and leave between steps (continuous batching).
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
  // One engine step: reap, admit, build the batch, decode, sample, release.
  void step();
  // Nothing running, preempted or waiting.
  bool idle() const { return running_.empty() && preempted_.empty() && waiting_.empty(); }
  // The drain is over: every request still here ends as cancelled.
  void cancel_all();
  // A step that threw (out of memory, a bug) ends the requests it was running, never the server.
  void fail_running(const std::string& what);

  // The next step's plan from the state as it is (before that step's admissions and the room it
  // makes), acting on nothing: planning reads the state only.
  StepPlan plan_preview() const { return plan_step().plan; }

  const SchedulerOptions& options() const { return options_; }
  // Any thread.
  int kv_capacity_cells() const { return kv_capacity_tokens_; }

 private:
  TimePoint now() const { return options_.clock(); }
  // A step's plan, and what it says of the state it was planned from.
  struct PlannedStep {
    StepPlan plan;
    int budget_for_newcomers = 0;   // tokens left after the decodes and running short prompts
    // A prompt chunk got fewer tokens than the budget allowed, for want of free cells (one
    // buffer): cached prefixes may give way.
    bool prompts_want_cells = false;
    bool long_stepped_aside = false;  // its long chunk gave way to short prompts
  };

  void reap_cancelled();
  // The acts of a step, before its plan.
  void make_room_for_decodes();
  void admit_waiting();
  void admit_pass();
  Sequence& start_sequence(std::unique_ptr<Sequence> sequence, const PrefixLookup& hit);
  bool make_room(int needed, int keep, int& committed);
  // The plan, from the state alone.
  PlannedStep plan_step() const;
  // plan_step() with the step costs first priced at the cells attended now.
  PlannedStep plan_at_current_cells();
  void add_prefill(PlannedStep& out, Sequence& sequence, int& budget, int& kv_free) const;
  int kv_free_cells(const StepPlan& plan) const;
  bool is_long_prompt(int tokens_to_prefill) const;
  bool is_long_prefill(const Sequence& sequence) const;
  bool has_running_room() const;
  bool waits_for_first_choice(const Request& request) const;
  size_t preemption_victim() const;
  void preempt_one();
  void preempt(size_t index);
  bool preempt_for_priority(TimePoint now);
  std::deque<std::unique_ptr<Sequence>>::iterator next_preempted(TimePoint now);
  void release_finished();
  void fail_batch(const std::string& error);
  void finish_unscheduled(Request& request, FinishReason reason, std::string error = {});
  static std::string deadline_message(const Request& request);
  int committed_kv_tokens() const;
  int decoding_sequences() const;
  void report();
  LiveLoad live_load() const;
  SchedulerSnapshot describe() const;
  WaitReason wait_reason(const Request& request, bool preempted) const;

  ModelRunner& engine_;
  const SchedulerOptions options_;
  ServingMetrics& metrics_;
  const ReportSink report_;
  const int kv_capacity_tokens_;
  // Cells kept free at admission for the running requests' next tokens (vLLM's watermark), so
  // a new request does not force a preemption at once.
  const int kv_watermark_tokens_;
  // One KV stream for all: requests compete for cells. With one stream per sequence each has
  // its own share and nothing is ever preempted.
  const bool kv_shared_;

  std::deque<std::shared_ptr<Request>> waiting_;     // in arrival order
  int queued_prompt_tokens_ = 0;                     // prompt tokens in waiting_
  std::vector<std::unique_ptr<Sequence>> running_;   // in arrival order
  std::deque<std::unique_ptr<Sequence>> preempted_;  // in arrival order; run before waiting_
  uint64_t next_admission_order_ = 0;
  KvManager kv_;
  QueuePolicy policy_;
  StepPlan plan_;  // the step's, while the executor runs it
  StepCosts costs_;
  // What finished requests generated, a moving average (0 until one finished): how long a
  // request that names no max_tokens is expected to run.
  double mean_output_tokens_ = 0;
  StepExecutor executor_;  // runs each step's plan on the engine
  bool long_prefill_stepped_aside_ = false;  // the last step's long chunk gave way
  // The last admission pass: why it stopped, for each waiting request's reason.
  struct AdmissionPass {
    AdmissionBlock blocked = AdmissionBlock::none;
    const Request* stopped_at = nullptr;  // kv_cache_full: the request that did not fit
    bool long_prompts_wait = false;       // --max-long-prefills long prompts were prefilling
    std::vector<const Request*> preempted_after;  // preempted for room since the pass
  } last_pass_;
};

}  // namespace brisk
