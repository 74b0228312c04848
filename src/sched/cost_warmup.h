#pragma once

#include <functional>
#include <vector>

#include "common/clock.h"
#include "engine/model_runner.h"
#include "sched/step_costs.h"

namespace brisk {

// What a new server's warm-up measured before its first request.
struct WarmupResult {
  bool ok = false;  // false: a decode failed; the costs stay unknown (learned from requests)
  int sequences = 0;
  int prompt_chunk_tokens = 0;
  double decode_one_ms = 0;       // a step of one sequence's decode
  double decode_full_ms = 0;      // a step of `sequences` decodes
  double prefill_ms_per_token = 0;
  // In a chunk of fewer than StepCosts::kTiledChunkTokens tokens (0: not measured).
  double small_chunk_prefill_ms_per_token = 0;
  double row_cell_ms = 0;         // what a row pays per cell it attends over (StepCosts)
  int filled_cells = 0;           // the cells it was measured at (0: not measured)
  double seconds = 0;             // the whole warm-up
};

// Runs a few steps on the empty KV cache, as the requests' steps would run, and teaches `costs`
// the fastest of each kind: three decodes of one sequence, two prompt chunks of up to
// `chunk_tokens` (less when a sequence's share of the cache is smaller), three decodes of
// `max_seqs` sequences at once, and those again once every sequence holds a copy of the first
// one's cells (what a row pays per cell it attends over). A first step, which faults in the compute buffers and runs
// several times slower, is run and not counted. The cache is empty again afterwards. Before the
// first request: a cold server otherwise prices its first admissions with no costs at all (150
// requests at once were all admitted up to the queue's length, and waited up to 82 s against a
// 30 s --max-queue-delay-ms).
// Steps are timed on `clock` (the scheduler's: a simulation's runner moves a virtual one).
// `more_decode_batches` (at most max_seqs each) are timed too, alongside the full batch:
// `brisk plan calibrate` measures the curve between one sequence and max_seqs this way.
WarmupResult warm_up_step_costs(ModelRunner& engine, StepCosts& costs, int max_seqs,
                                int chunk_tokens,
                                const std::function<TimePoint()>& clock = Clock::now,
                                const std::vector<int>& more_decode_batches = {});

}  // namespace brisk
