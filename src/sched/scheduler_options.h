#pragma once

#include <functional>

#include "common/clock.h"
#include "sched/kv_ledger.h"
#include "sched/queue_policy.h"

namespace brisk {

// How brisk serve schedules (serve flags, docs/cli.md): what the planner, the scheduler and the
// engine loop read.
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

}  // namespace brisk
