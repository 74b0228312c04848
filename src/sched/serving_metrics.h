#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/histogram.h"
#include "sched/request.h"
#include "sched/scheduler_snapshot.h"

namespace brisk {

// Live state of the scheduler, read when /metrics is rendered.
struct SchedulerStats {
  int running = 0;
  int waiting = 0;
  int preempted = 0;    // of `waiting`: preempted, waiting to recompute their KV
  int max_waiting = 0;  // --max-queued-requests: the queue is full at this many
  int free_sequences = 0;  // sequences no request runs on (as of the last step)
  double kv_cache_usage_ratio = 0;
  int prefix_cache_cells = 0;      // KV cells only cached prefixes hold (evictable)
  int prefix_cache_sequences = 0;  // finished requests whose cells are kept for reuse
  int kv_capacity_cells = 0;
  int kv_running_cells = 0;    // held by running requests
  int kv_committed_cells = 0;  // and what their prompts still need (as of the last step)
  AdmissionBlock admission_blocked = AdmissionBlock::none;  // why the queue waits

  // As submit() decides: preempted requests do not take places in the queue, nor do those a
  // free sequence takes at the next step.
  bool queue_full() const {
    return max_waiting > 0 && waiting - preempted - free_sequences >= max_waiting;
  }
};

// Where one engine step's time went (brisk_step_phase_seconds).
struct StepPhases {
  double schedule_seconds = 0;  // reaping, admission, building the batch
  double decode_seconds = 0;    // llama_decode, until the backend has finished
  double sample_seconds = 0;    // drawing every sequence's next token
  double commit_seconds = 0;    // stop matching, detokenizing, posting tokens to the streams
};

// Every number /metrics shows of one generative model (its refusals:
// server/rejection_counts.h). Names follow vLLM's with a brisk_ prefix (docs/metrics.md).
class ServingMetrics {
 public:
  ServingMetrics();

  void observe_first_token(double ttft_seconds) { time_to_first_token_.observe(ttft_seconds); }
  void observe_inter_token(double gap_seconds) { inter_token_latency_.observe(gap_seconds); }
  void observe_step(int decode_tokens, int prefill_tokens, double step_seconds,
                    const StepPhases& phases);
  void observe_finished(const RequestTimings& timings, FinishReason reason);
  void count_preemption() { ++preemptions_; }
  void count_preemption_swap() { ++preemption_swaps_; }
  // A step whose admission pass left requests waiting, and why (a counter cannot miss a
  // short block between two scrapes, as the waiting_by_reason gauge can).
  void count_admission_block(AdmissionBlock why);
  // A prompt looked up in the prefix cache: `hit_tokens` of its `query_tokens` reused, or why
  // none were (`miss_reason` is "none" on a hit).
  void observe_prefix_lookup(int query_tokens, int hit_tokens, const char* miss_reason);
  void count_prefix_eviction() { ++prefix_evictions_; }
  // The host tier (--cache-ram): an evicted sequence's state saved, a hit restored from it, an
  // entry it evicted for bytes, and what it holds now.
  void count_host_save(size_t bytes, double seconds);
  void count_host_restore(int tokens, size_t bytes, double seconds);
  void count_host_eviction() { ++host_evictions_; }
  void set_host_tier(size_t bytes, size_t entries, size_t capacity_bytes);

  std::string render_prometheus(const SchedulerStats& stats) const;
  void render_prefix_cache(const SchedulerStats& stats, std::string& out) const;
  // The gauges under vLLM's names (--metrics-compat vllm), with vLLM's meaning and its
  // model_name label: what the Gateway API Inference Extension's endpoint picker reads.
  static std::string render_vllm_compat(const SchedulerStats& stats, const std::string& model_name);

 private:
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_request_latency_;
  Histogram request_queue_time_;
  Histogram request_prefill_time_;
  Histogram request_decode_time_;
  Histogram batch_tokens_;
  Histogram step_decode_tokens_;
  Histogram step_prefill_tokens_;
  Histogram step_duration_;
  Histogram step_schedule_;
  Histogram step_decode_;
  Histogram step_sample_;
  Histogram step_commit_;
  std::atomic<uint64_t> prompt_tokens_{0};
  std::atomic<uint64_t> generation_tokens_{0};
  std::atomic<uint64_t> preemptions_{0};
  std::atomic<uint64_t> preemption_swaps_{0};
  // Indexed by AdmissionBlock (none stays 0).
  std::atomic<uint64_t>
      admission_blocks_[static_cast<size_t>(AdmissionBlock::first_choice_prefill) + 1] = {};
  std::atomic<uint64_t> prefix_queries_{0};
  std::atomic<uint64_t> prefix_query_tokens_{0};
  std::atomic<uint64_t> prefix_hits_{0};
  std::atomic<uint64_t> prefix_hit_tokens_{0};
  std::atomic<uint64_t> prefix_evictions_{0};
  std::atomic<uint64_t> host_saves_{0};
  std::atomic<uint64_t> host_saved_bytes_{0};
  std::atomic<uint64_t> host_save_microseconds_{0};
  std::atomic<uint64_t> host_restores_{0};
  std::atomic<uint64_t> host_restored_tokens_{0};
  std::atomic<uint64_t> host_restored_bytes_{0};
  std::atomic<uint64_t> host_restore_microseconds_{0};
  std::atomic<uint64_t> host_evictions_{0};
  std::atomic<uint64_t> host_bytes_{0};
  std::atomic<uint64_t> host_entries_{0};
  std::atomic<uint64_t> host_capacity_bytes_{0};
  mutable std::mutex counters_mutex_;
  std::map<std::string, uint64_t> finished_by_reason_;
  std::map<std::string, uint64_t> prefix_misses_by_reason_;
};

}  // namespace brisk
