#include "sched/serving_metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "sched/kv_manager.h"

namespace brisk {
namespace {

std::vector<double> batch_token_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
}

// Why requests wait in the queue: the label values of the waiting and blocked-step metrics.
constexpr AdmissionBlock kWaitReasons[] = {
    AdmissionBlock::no_free_sequence, AdmissionBlock::kv_cache_full,
    AdmissionBlock::long_prefill_turn, AdmissionBlock::step_budget,
    AdmissionBlock::first_choice_prefill};

void append_header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void append_histogram(std::string& out, const char* name, const char* help,
                      const Histogram& histogram) {
  append_header(out, name, "histogram", help);
  out += histogram.render_prometheus(name);
}

}  // namespace

ServingMetrics::ServingMetrics()
    : time_to_first_token_(Histogram::latency_seconds_buckets()),
      inter_token_latency_(Histogram::latency_seconds_buckets()),
      e2e_request_latency_(Histogram::latency_seconds_buckets()),
      request_queue_time_(Histogram::latency_seconds_buckets()),
      request_prefill_time_(Histogram::latency_seconds_buckets()),
      request_decode_time_(Histogram::latency_seconds_buckets()),
      batch_tokens_(batch_token_buckets()),
      step_decode_tokens_(batch_token_buckets()),
      step_prefill_tokens_(batch_token_buckets()),
      step_duration_(Histogram::latency_seconds_buckets()),
      step_schedule_(Histogram::step_phase_seconds_buckets()),
      step_decode_(Histogram::step_phase_seconds_buckets()),
      step_sample_(Histogram::step_phase_seconds_buckets()),
      step_commit_(Histogram::step_phase_seconds_buckets()) {
  // Every reason's series exists from the first scrape, at 0: rate() needs a sample before the
  // first increase, or the first requests of a reason never show in a dashboard.
  for (const FinishReason reason :
       {FinishReason::stop, FinishReason::length, FinishReason::cancelled, FinishReason::error,
        FinishReason::deadline}) {
    finished_by_reason_[finish_reason_name(reason)] = 0;
  }
}

void ServingMetrics::observe_step(int decode_tokens, int prefill_tokens, double step_seconds,
                                  const StepPhases& phases) {
  batch_tokens_.observe(decode_tokens + prefill_tokens);
  step_decode_tokens_.observe(decode_tokens);
  step_prefill_tokens_.observe(prefill_tokens);
  step_duration_.observe(step_seconds);
  step_schedule_.observe(phases.schedule_seconds);
  step_decode_.observe(phases.decode_seconds);
  step_sample_.observe(phases.sample_seconds);
  step_commit_.observe(phases.commit_seconds);
}

void ServingMetrics::observe_finished(const RequestTimings& timings, FinishReason reason) {
  e2e_request_latency_.observe(timings.e2e_ms / 1000.0);
  request_queue_time_.observe(timings.queue_ms / 1000.0);
  if (timings.completion_tokens > 0) {
    request_prefill_time_.observe(timings.prefill_ms / 1000.0);
    request_decode_time_.observe(timings.decode_ms / 1000.0);
  }
  prompt_tokens_ += static_cast<uint64_t>(timings.prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(timings.completion_tokens);
  std::lock_guard lock(counters_mutex_);
  ++finished_by_reason_[finish_reason_name(reason)];
}

void ServingMetrics::observe_prefix_lookup(int query_tokens, int hit_tokens,
                                           const char* miss_reason) {
  ++prefix_queries_;
  prefix_query_tokens_ += static_cast<uint64_t>(query_tokens);
  if (hit_tokens > 0) {
    ++prefix_hits_;
    prefix_hit_tokens_ += static_cast<uint64_t>(hit_tokens);
    return;
  }
  std::lock_guard lock(counters_mutex_);
  ++prefix_misses_by_reason_[miss_reason];
}

void ServingMetrics::count_admission_block(AdmissionBlock why) {
  if (why != AdmissionBlock::none) ++admission_blocks_[static_cast<size_t>(why)];
}

std::string ServingMetrics::render_prometheus(const SchedulerStats& stats) const {
  std::string out;
  append_header(out, "brisk_requests_running", "gauge", "Requests in the running batch.");
  out += fmt::format("brisk_requests_running {}\n", stats.running);
  append_header(out, "brisk_requests_waiting", "gauge", "Requests admitted and waiting to run.");
  out += fmt::format("brisk_requests_waiting {}\n", stats.waiting);
  append_header(out, "brisk_requests_preempted", "gauge",
                "Of the waiting requests, those preempted (to restore or recompute their KV "
                "cache).");
  out += fmt::format("brisk_requests_preempted {}\n", stats.preempted);
  append_header(out, "brisk_preemptions_total", "counter",
                "Running requests that gave up their KV cache for others, to restore or recompute "
                "it later.");
  out += fmt::format("brisk_preemptions_total {}\n", preemptions_.load());
  append_header(out, "brisk_preemption_swaps_total", "counter",
                "Preempted requests whose KV state went to the host tier, to be restored rather "
                "than recomputed when they resume.");
  out += fmt::format("brisk_preemption_swaps_total {}\n", preemption_swaps_.load());
  append_header(out, "brisk_requests_waiting_by_reason", "gauge",
                "Waiting requests by why they are not running: preempted, or the reason the "
                "last admission pass stopped (docs/metrics.md).");
  const int queued = stats.waiting - stats.preempted;
  for (const AdmissionBlock block : kWaitReasons) {
    out += fmt::format("brisk_requests_waiting_by_reason{{reason=\"{}\"}} {}\n",
                       admission_block_name(block), stats.admission_blocked == block ? queued : 0);
  }
  out +=
      fmt::format("brisk_requests_waiting_by_reason{{reason=\"preempted\"}} {}\n", stats.preempted);
  append_header(out, "brisk_admission_blocked_steps_total", "counter",
                "Engine steps whose admission pass left requests waiting, by why.");
  for (const AdmissionBlock block : kWaitReasons) {
    out += fmt::format("brisk_admission_blocked_steps_total{{reason=\"{}\"}} {}\n",
                       admission_block_name(block),
                       admission_blocks_[static_cast<size_t>(block)].load());
  }
  append_header(out, "brisk_kv_cache_cells", "gauge",
                "KV cells by holder: running requests, cached prefixes only, free.");
  out += fmt::format("brisk_kv_cache_cells{{state=\"running\"}} {}\n", stats.kv_running_cells);
  out += fmt::format("brisk_kv_cache_cells{{state=\"cached\"}} {}\n", stats.prefix_cache_cells);
  out += fmt::format(
      "brisk_kv_cache_cells{{state=\"free\"}} {}\n",
      std::max(0, stats.kv_capacity_cells - stats.kv_running_cells - stats.prefix_cache_cells));
  append_header(out, "brisk_kv_cache_committed_cells", "gauge",
                "Cells the running requests hold plus what their prompts still need: what "
                "admission counts (no max_tokens is reserved).");
  out += fmt::format("brisk_kv_cache_committed_cells {}\n", stats.kv_committed_cells);
  append_header(out, "brisk_kv_cache_usage_ratio", "gauge",
                "Fraction of KV cache cells holding tokens of running requests.");
  out += fmt::format("brisk_kv_cache_usage_ratio {}\n", stats.kv_cache_usage_ratio);

  append_header(out, "brisk_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  out += fmt::format("brisk_prompt_tokens_total {}\n", prompt_tokens_.load());
  append_header(out, "brisk_generation_tokens_total", "counter",
                "Generated tokens of finished requests.");
  out += fmt::format("brisk_generation_tokens_total {}\n", generation_tokens_.load());
  {
    std::lock_guard lock(counters_mutex_);
    append_header(out, "brisk_requests_finished_total", "counter",
                  "Finished requests by finish reason.");
    for (const auto& [reason, count] : finished_by_reason_) {
      out += fmt::format("brisk_requests_finished_total{{finished_reason=\"{}\"}} {}\n", reason,
                         count);
    }
  }

  render_prefix_cache(stats, out);

  append_histogram(out, "brisk_time_to_first_token_seconds", "Arrival to first generated token.",
                   time_to_first_token_);
  append_histogram(out, "brisk_inter_token_latency_seconds",
                   "Gap between consecutive generated tokens of a request.", inter_token_latency_);
  append_histogram(out, "brisk_e2e_request_latency_seconds", "Arrival to finish.",
                   e2e_request_latency_);
  append_histogram(out, "brisk_request_queue_time_seconds", "Arrival to first scheduled in a step.",
                   request_queue_time_);
  append_histogram(out, "brisk_request_prefill_time_seconds",
                   "First scheduled to first token (prompt processing).", request_prefill_time_);
  append_histogram(out, "brisk_request_decode_time_seconds", "First token to finish.",
                   request_decode_time_);
  append_histogram(out, "brisk_batch_tokens", "Tokens carried by one engine step.", batch_tokens_);
  append_header(out, "brisk_step_tokens", "histogram",
                "Tokens of one engine step by phase: decode (one per running stream) and "
                "prefill (prompt chunks).");
  out += step_decode_tokens_.render_prometheus("brisk_step_tokens", "phase=\"decode\"");
  out += step_prefill_tokens_.render_prometheus("brisk_step_tokens", "phase=\"prefill\"");
  append_histogram(out, "brisk_step_duration_seconds", "Wall time of one engine step.",
                   step_duration_);
  append_header(out, "brisk_step_phase_seconds", "histogram",
                "Wall time of one engine step by phase: schedule (admission, building the batch), "
                "decode (llama_decode), sample (drawing next tokens), commit (stop matching, "
                "detokenizing, streaming).");
  const std::pair<const char*, const Histogram*> phases[] = {{"schedule", &step_schedule_},
                                                             {"decode", &step_decode_},
                                                             {"sample", &step_sample_},
                                                             {"commit", &step_commit_}};
  for (const auto& [phase, histogram] : phases) {
    out += histogram->render_prometheus("brisk_step_phase_seconds",
                                        fmt::format("phase=\"{}\"", phase));
  }
  return out;
}

void ServingMetrics::count_host_save(size_t bytes, double seconds) {
  ++host_saves_;
  host_saved_bytes_ += bytes;
  host_save_microseconds_ += static_cast<uint64_t>(seconds * 1e6);
}

void ServingMetrics::count_host_restore(int tokens, size_t bytes, double seconds) {
  ++host_restores_;
  host_restored_tokens_ += static_cast<uint64_t>(tokens);
  host_restored_bytes_ += bytes;
  host_restore_microseconds_ += static_cast<uint64_t>(seconds * 1e6);
}

void ServingMetrics::set_host_tier(size_t bytes, size_t entries, size_t capacity_bytes) {
  host_bytes_ = bytes;
  host_entries_ = entries;
  host_capacity_bytes_ = capacity_bytes;
}

void ServingMetrics::render_prefix_cache(const SchedulerStats& stats, std::string& out) const {
  append_header(out, "brisk_prefix_cache_queries_total", "counter",
                "Prompts looked up in the prefix cache.");
  out += fmt::format("brisk_prefix_cache_queries_total {}\n", prefix_queries_.load());
  append_header(out, "brisk_prefix_cache_query_tokens_total", "counter",
                "Prompt tokens looked up in the prefix cache.");
  out += fmt::format("brisk_prefix_cache_query_tokens_total {}\n", prefix_query_tokens_.load());
  append_header(out, "brisk_prefix_cache_hits_total", "counter",
                "Prompts that reused cached KV cells.");
  out += fmt::format("brisk_prefix_cache_hits_total {}\n", prefix_hits_.load());
  append_header(out, "brisk_prefix_cache_hit_tokens_total", "counter",
                "Prompt tokens whose KV cells were reused instead of computed.");
  out += fmt::format("brisk_prefix_cache_hit_tokens_total {}\n", prefix_hit_tokens_.load());
  append_header(out, "brisk_prefix_cache_misses_total", "counter",
                "Prompts that reused nothing, by reason (docs/scheduling.md).");
  {
    std::lock_guard lock(counters_mutex_);
    for (const PrefixMiss miss :
         {PrefixMiss::no_match, PrefixMiss::below_minimum, PrefixMiss::window_expired,
          PrefixMiss::evicted, PrefixMiss::host_evicted, PrefixMiss::restore_failed,
          PrefixMiss::disabled}) {
      const char* reason = prefix_miss_name(miss);
      const auto it = prefix_misses_by_reason_.find(reason);
      out += fmt::format("brisk_prefix_cache_misses_total{{reason=\"{}\"}} {}\n", reason,
                         it == prefix_misses_by_reason_.end() ? 0 : it->second);
    }
  }
  append_header(out, "brisk_prefix_cache_evictions_total", "counter",
                "Cached prefixes freed to make room, least recently used first.");
  out += fmt::format("brisk_prefix_cache_evictions_total {}\n", prefix_evictions_.load());
  append_header(out, "brisk_prefix_cache_cells", "gauge",
                "KV cells held only by cached prefixes (freed on demand).");
  out += fmt::format("brisk_prefix_cache_cells {}\n", stats.prefix_cache_cells);
  append_header(out, "brisk_prefix_cache_sequences", "gauge",
                "Finished requests whose KV cells are kept for reuse.");
  out += fmt::format("brisk_prefix_cache_sequences {}\n", stats.prefix_cache_sequences);
  const auto counter = [&](const char* name, const char* help, double value) {
    append_header(out, name, "counter", help);
    out += fmt::format("{} {}\n", name, value);
  };
  const auto gauge = [&](const char* name, const char* help, double value) {
    append_header(out, name, "gauge", help);
    out += fmt::format("{} {}\n", name, value);
  };
  counter("brisk_prefix_cache_host_saves_total",
          "Evicted sequences whose KV state was saved in the host tier (--cache-ram).",
          host_saves_.load());
  counter("brisk_prefix_cache_host_saved_bytes_total", "Bytes saved in the host tier.",
          host_saved_bytes_.load());
  counter("brisk_prefix_cache_host_save_seconds_total", "Time spent saving to the host tier.",
          host_save_microseconds_.load() / 1e6);
  counter("brisk_prefix_cache_host_restores_total",
          "Prefix-cache hits restored from the host tier instead of computed.",
          host_restores_.load());
  counter(
      "brisk_prefix_cache_host_hit_tokens_total",
      "Prompt tokens restored from the host tier (also in brisk_prefix_cache_hit_tokens_total).",
      host_restored_tokens_.load());
  counter("brisk_prefix_cache_host_restored_bytes_total", "Bytes restored from the host tier.",
          host_restored_bytes_.load());
  counter("brisk_prefix_cache_host_restore_seconds_total",
          "Time spent restoring from the host tier.", host_restore_microseconds_.load() / 1e6);
  counter("brisk_prefix_cache_host_evictions_total",
          "Host-tier entries evicted to stay within --cache-ram, least recently used first.",
          host_evictions_.load());
  gauge("brisk_prefix_cache_host_bytes", "Bytes the host tier holds.", host_bytes_.load());
  gauge("brisk_prefix_cache_host_entries", "Sequences the host tier holds.", host_entries_.load());
  gauge("brisk_prefix_cache_host_capacity_bytes", "The host tier's budget (--cache-ram).",
        host_capacity_bytes_.load());
}

std::string ServingMetrics::render_vllm_compat(const SchedulerStats& stats,
                                               const std::string& model_name) {
  // A label value escapes backslash, quote and newline (Prometheus text format).
  std::string label;
  for (char c : model_name) {
    if (c == '\\' || c == '"') label += '\\';
    if (c == '\n') {
      label += "\\n";
      continue;
    }
    label += c;
  }
  const std::string labels = fmt::format("{{model_name=\"{}\"}}", label);
  std::string out;
  append_header(out, "vllm:num_requests_running", "gauge",
                "Requests in the running batch (brisk_requests_running).");
  out += fmt::format("vllm:num_requests_running{} {}\n", labels, stats.running);
  append_header(out, "vllm:num_requests_waiting", "gauge",
                "Requests waiting to run (brisk_requests_waiting).");
  out += fmt::format("vllm:num_requests_waiting{} {}\n", labels, stats.waiting);
  // vLLM's "perc" is a fraction: 1 means the whole cache. The older name is kept for readers
  // that still ask for it.
  for (const char* name : {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}) {
    append_header(out, name, "gauge", "KV cache usage, 1 = full (brisk_kv_cache_usage_ratio).");
    out += fmt::format("{}{} {}\n", name, labels, stats.kv_cache_usage_ratio);
  }
  return out;
}

}  // namespace brisk
