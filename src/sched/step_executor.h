#pragma once

#include <functional>
#include <vector>

#include "common/clock.h"
#include "common/worker_pool.h"
#include "engine/model_runner.h"
#include "sched/kv_manager.h"
#include "sched/serving_metrics.h"
#include "sched/step_costs.h"
#include "sched/step_plan.h"

namespace brisk {

// Runs a step plan on the model, on the engine thread: fills the batch, decodes, and once the
// decode succeeded records the computed cells in the prefix tree, commits the plan to its
// sequences and samples each one's next token (in parallel: the samplers are independent).
// It decides nothing: which sequences run, and what to do when the decode finds no room, is the
// scheduler's (sched/step_scheduler.h).
class StepExecutor {
 public:
  StepExecutor(ModelRunner& engine, KvManager& kv, StepCosts& costs, ServingMetrics& metrics,
               int sampling_threads, std::function<TimePoint()> clock, bool log_steps = true);

  // no_kv_space: nothing of the plan was applied (the caller may make room and plan again);
  // failed: the engine could not decode it. `step_started` is when the scheduler began the
  // step: the phases' timing counts planning from there.
  DecodeStatus run(StepPlan& plan, TimePoint step_started);

 private:
  void record_computed_cells(const StepPlan& plan);
  void sample(const StepPlan& plan);
  void commit_samples();

  ModelRunner& engine_;
  KvManager& kv_;
  StepCosts& costs_;
  ServingMetrics& metrics_;
  const std::function<TimePoint()> clock_;
  const bool log_steps_;  // at trace level
  // With a KV buffer per sequence llama.cpp computes runs of consecutive sequence ids
  // (StepPlan::order_by_sequence_id).
  const bool buffer_per_sequence_;
  WorkerPool sampling_pool_;
  TokenList computed_;                // scratch for record_computed_cells
  std::vector<Sequence*> to_sample_;  // this step's sequences with logits, and their results
  std::vector<const float*> sample_logits_;
  std::vector<SampledToken> samples_;
};

}  // namespace brisk
