#include "sched/step_scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace brisk {

StepScheduler::StepScheduler(Engine& engine, SchedulerOptions options, ServingMetrics& metrics)
    : engine_(engine),
      options_(options),
      metrics_(metrics),
      kv_capacity_tokens_(engine.context_size()),
      sampling_pool_(options.sampling_threads) {
  for (int slot = options_.max_seqs - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

StepScheduler::~StepScheduler() { shutdown(std::chrono::milliseconds(0)); }

void StepScheduler::start() {
  engine_thread_ = std::thread([this] { run_loop(); });
}

SubmitStatus StepScheduler::submit(std::shared_ptr<Request> request) {
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return SubmitStatus::shutting_down;
    if (static_cast<int>(waiting_.size()) >= options_.max_queued_requests) {
      return SubmitStatus::queue_full;
    }
    waiting_.push_back(std::move(request));
  }
  work_available_.notify_one();
  return SubmitStatus::accepted;
}

void StepScheduler::wake() {
  {
    std::lock_guard lock(mutex_);
    wake_pending_ = true;
  }
  work_available_.notify_one();
}

// The engine thread decides when the drain is over (it alone knows whether a request is between
// the queue and the running set), so nothing admitted before `accepting_` fell is lost.
void StepScheduler::shutdown(std::chrono::milliseconds drain_timeout) {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    if (!draining_ || Clock::now() + drain_timeout < drain_deadline_) {
      drain_deadline_ = Clock::now() + drain_timeout;
    }
    draining_ = true;
  }
  work_available_.notify_one();
  if (engine_thread_.joinable()) engine_thread_.join();
}

SchedulerStats StepScheduler::stats() const {
  SchedulerStats stats;
  {
    std::lock_guard lock(mutex_);  // with admit_waiting's: a request is waiting or running
    stats.running = running_count_.load();
    stats.waiting = static_cast<int>(waiting_.size());
    stats.max_waiting = options_.max_queued_requests;
  }
  stats.kv_cache_usage_ratio =
      kv_capacity_tokens_ > 0 ? static_cast<double>(kv_tokens_in_use_.load()) / kv_capacity_tokens_
                              : 0.0;
  return stats;
}

void StepScheduler::run_loop() {
  while (wait_for_work()) {
    try {
      step();
    } catch (const std::exception& e) {
      fail_running(e.what());
    }
  }
  // The drain is over: cancel everything still here.
  for (auto& sequence : running_) sequence->finish(FinishReason::cancelled, metrics_);
  release_finished();
  std::deque<std::shared_ptr<Request>> abandoned;
  {
    std::lock_guard lock(mutex_);
    abandoned.swap(waiting_);
  }
  for (auto& request : abandoned) finish_unscheduled(*request, FinishReason::cancelled);
}

// Blocks while there is nothing to do; false once the scheduler should stop: draining, and
// either out of work or past the drain's deadline.
bool StepScheduler::wait_for_work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const bool idle = running_.empty() && waiting_.empty();
    if (draining_ && (idle || Clock::now() >= drain_deadline_)) return false;
    if (!idle || wake_pending_) break;
    if (draining_) {
      work_available_.wait_until(lock, drain_deadline_);
    } else {
      work_available_.wait(lock);
    }
  }
  wake_pending_ = false;
  return true;
}

void StepScheduler::step() {
  const TimePoint step_started = Clock::now();
  reap_cancelled();
  engine_.clear_batch();
  in_batch_.clear();

  // Decodes first: every running stream gets its next token in this step.
  for (auto& sequence : running_) {
    if (!sequence->prefill_done()) continue;
    sequence->add_decode_token(engine_);
    in_batch_.push_back(sequence.get());
  }
  // Then prompt chunks, oldest first, up to the step's token budget.
  const int decode_tokens = engine_.batch_size();
  int budget = prefill_budget(decode_tokens);
  for (auto& sequence : running_) {
    if (budget <= 0) break;
    if (sequence->prefill_done()) continue;
    budget -= sequence->add_prefill_chunk(engine_, budget);
    in_batch_.push_back(sequence.get());
  }
  admit_waiting(budget);

  if (engine_.batch_size() > 0) run_decode_and_sample(decode_tokens, step_started);
  release_finished();
}

int StepScheduler::prefill_budget(int decode_tokens) const {
  const int token_budget = options_.max_batched_tokens - decode_tokens;
  if (options_.max_step_ms <= 0 || decode_tokens == 0 || prefill_ms_per_token_ <= 0) {
    return token_budget;
  }
  // A floor keeps prompts moving even when decodes alone use up the time target.
  constexpr int kMinChunkTokens = 16;
  const double spare_ms = options_.max_step_ms - decode_step_ms_;
  const int timed_budget = static_cast<int>(spare_ms / prefill_ms_per_token_);
  return std::min(token_budget, std::max(kMinChunkTokens, timed_budget));
}

void StepScheduler::learn_step_cost(int decode_tokens, int prefill_tokens, double step_ms) {
  constexpr double kWeight = 0.2;
  auto blend = [](double average, double sample) {
    return average <= 0 ? sample : (1 - kWeight) * average + kWeight * sample;
  };
  if (prefill_tokens == 0) {
    decode_step_ms_ = blend(decode_step_ms_, step_ms);
  } else if (prefill_tokens >= 16) {
    const double decode_part = decode_tokens > 0 ? decode_step_ms_ : 0;
    prefill_ms_per_token_ =
        blend(prefill_ms_per_token_, std::max(0.0, step_ms - decode_part) / prefill_tokens);
  }
}

void StepScheduler::reap_cancelled() {
  for (auto& sequence : running_) {
    if (sequence->request().cancelled.load()) sequence->finish(FinishReason::cancelled, metrics_);
  }
  release_finished();
  std::vector<std::shared_ptr<Request>> cancelled;
  {
    std::lock_guard lock(mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->cancelled.load()) {
        cancelled.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& request : cancelled) finish_unscheduled(*request, FinishReason::cancelled);
}

void StepScheduler::admit_waiting(int& budget) {
  int reserved = reserved_kv_tokens();
  while (budget > 0 && !free_slots_.empty()) {
    std::shared_ptr<Request> request;
    {
      std::lock_guard lock(mutex_);
      if (waiting_.empty()) return;
      // First come, first served: a large request at the head waits for room rather than
      // being overtaken forever by small ones.
      if (reserved + waiting_.front()->reserved_kv_tokens() > kv_capacity_tokens_) return;
      request = std::move(waiting_.front());
      waiting_.pop_front();
      // Counted as running before it leaves the queue's count: stats() reads both under this
      // lock, so /metrics never sees the request nowhere (during a long first step it did).
      ++running_count_;
    }
    reserved += request->reserved_kv_tokens();
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    auto sequence = std::make_unique<Sequence>(std::move(request), slot, Clock::now());
    budget -= sequence->add_prefill_chunk(engine_, budget);
    in_batch_.push_back(sequence.get());
    running_.push_back(std::move(sequence));
  }
}

void StepScheduler::run_decode_and_sample(int decode_tokens, TimePoint step_started) {
  const int batch_tokens = engine_.batch_size();
  const TimePoint started = Clock::now();
  const DecodeStatus status = engine_.decode();
  if (status != DecodeStatus::ok) {
    fail_batch(status == DecodeStatus::no_kv_space
                   ? "the KV cache is full (raise --ctx-size or lower --max-seqs)"
                   : "the engine failed to decode this batch");
    return;
  }
  engine_.synchronize();  // a GPU backend may still be computing; count that as decode time
  const TimePoint decoded = Clock::now();
  sample_batch();
  const TimePoint sampled = Clock::now();
  commit_samples();
  const TimePoint committed = Clock::now();

  StepPhases phases;
  phases.schedule_seconds = seconds_between(step_started, started);
  phases.decode_seconds = seconds_between(started, decoded);
  phases.sample_seconds = seconds_between(decoded, sampled);
  phases.commit_seconds = seconds_between(sampled, committed);
  const double step_seconds = seconds_between(started, committed);
  metrics_.observe_step(batch_tokens, step_seconds, phases);
  learn_step_cost(decode_tokens, batch_tokens - decode_tokens, step_seconds * 1000.0);
}

// Draws every sequence's next token; the sequences' samplers are independent, so the draws run
// in parallel and a step's sampling time does not grow as vocabulary x sequences on one thread.
void StepScheduler::sample_batch() {
  to_sample_.clear();
  sample_logits_.clear();
  for (Sequence* sequence : in_batch_) {
    if (sequence->logits_index() < 0 || sequence->finished()) continue;
    to_sample_.push_back(sequence);
    sample_logits_.push_back(engine_.logits(sequence->logits_index()));
  }
  samples_.assign(to_sample_.size(), SampledToken{});
  const int vocabulary = engine_.vocabulary_size();
  sampling_pool_.run(static_cast<int>(to_sample_.size()), [&](int i) {
    Sequence& sequence = *to_sample_[static_cast<size_t>(i)];
    samples_[static_cast<size_t>(i)] = sequence.sampler().sample(
        sample_logits_[static_cast<size_t>(i)], vocabulary, sequence.request().top_logprobs);
  });
}

// Stop matching, detokenizing and posting updates stay on the engine thread, in batch order.
void StepScheduler::commit_samples() {
  for (size_t i = 0; i < to_sample_.size(); ++i) {
    to_sample_[i]->accept_token(std::move(samples_[i]), engine_, metrics_);
  }
}

// A step that throws (out of memory, a bug) ends the requests it was running, never the server.
void StepScheduler::fail_running(const std::string& what) {
  spdlog::error("engine step failed: {}; ending the {} running requests", what, running_.size());
  const std::string error = "the server failed while generating this response; it has been logged";
  for (auto& sequence : running_) {
    if (!sequence->finished()) sequence->finish(FinishReason::error, metrics_, error);
  }
  release_finished();
}

void StepScheduler::fail_batch(const std::string& error) {
  spdlog::error("step of {} tokens failed: {}", engine_.batch_size(), error);
  for (Sequence* sequence : in_batch_) sequence->finish(FinishReason::error, metrics_, error);
}

// Frees the KV cells and slot of every finished sequence, so the next step can reuse them.
void StepScheduler::release_finished() {
  for (auto& sequence : running_) {
    if (!sequence->finished()) continue;
    engine_.release_sequence(sequence->slot());
    free_slots_.push_back(sequence->slot());
  }
  std::erase_if(running_, [](const auto& sequence) { return sequence->finished(); });
  int kv_tokens = 0;
  for (const auto& sequence : running_) kv_tokens += sequence->kv_tokens();
  running_count_ = static_cast<int>(running_.size());
  kv_tokens_in_use_ = kv_tokens;
}

void StepScheduler::finish_unscheduled(Request& request, FinishReason reason) {
  RequestTimings timings;
  timings.e2e_ms = ms_between(request.arrival, Clock::now());
  timings.queue_ms = timings.e2e_ms;
  timings.prompt_tokens = static_cast<int>(request.prompt_tokens.size());
  metrics_.observe_finished(timings, reason);
  GenerationUpdate update;
  update.finish_reason = reason;
  update.timings = timings;
  request.on_update(std::move(update));
}

int StepScheduler::reserved_kv_tokens() const {
  int reserved = 0;
  for (const auto& sequence : running_) reserved += sequence->request().reserved_kv_tokens();
  return reserved;
}

}  // namespace brisk
