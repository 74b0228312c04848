#include "sched/step_executor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace brisk {

namespace {

// `--log-level trace`: what a step carried and what it cost, one line a step (#N: a request's
// admission order; its prompt chunk's tokens).
void log_step(const StepPlan& plan, int attended_cells, double predicted_ms,
              const StepPhases& phases) {
  std::string chunks;
  for (const StepPlan::Entry& entry : plan.entries()) {
    if (entry.decode) continue;
    if (!chunks.empty()) chunks += ' ';
    chunks += fmt::format("#{}:{}", entry.sequence->admission_order(), entry.tokens);
  }
  spdlog::trace(
      "step: {} decodes, prompt chunks [{}], {} cells attended; planned {:.1f} ms, "
      "scheduling {:.1f} ms, decode {:.1f} ms, sampling {:.1f} ms",
      plan.decode_tokens(), chunks, attended_cells, predicted_ms, phases.schedule_seconds * 1000,
      phases.decode_seconds * 1000, phases.sample_seconds * 1000);
}

}  // namespace

StepExecutor::StepExecutor(ModelRunner& engine, KvManager& kv, StepCosts& costs,
                           ServingMetrics& metrics, int sampling_threads,
                           std::function<TimePoint()> clock, bool log_steps)
    : engine_(engine),
      kv_(kv),
      costs_(costs),
      metrics_(metrics),
      clock_(std::move(clock)),
      log_steps_(log_steps),
      buffer_per_sequence_(engine.sequence_context_size() != engine.context_size()),
      sampling_pool_(sampling_threads) {}

DecodeStatus StepExecutor::run(StepPlan& plan, TimePoint step_started) {
  if (buffer_per_sequence_) plan.order_by_sequence_id();
  plan.fill_batch(engine_);
  const TimePoint started = clock_();
  const DecodeStatus status = engine_.decode();
  if (status != DecodeStatus::ok) return status;
  record_computed_cells(plan);
  plan.commit();

  const int batch_tokens = engine_.batch_size();
  engine_.synchronize();  // a GPU backend may still be computing; count that as decode time
  const TimePoint decoded = clock_();
  sample(plan);
  const TimePoint sampled = clock_();
  commit_samples();
  const TimePoint committed = clock_();

  StepPhases phases;
  phases.schedule_seconds = seconds_between(step_started, started);
  phases.decode_seconds = seconds_between(started, decoded);
  phases.sample_seconds = seconds_between(decoded, sampled);
  phases.commit_seconds = seconds_between(sampled, committed);
  const double step_seconds = seconds_between(started, committed);
  const int decode_tokens = plan.decode_tokens();
  if (log_steps_ && spdlog::should_log(spdlog::level::trace)) {
    log_step(plan, costs_.attended_cells(),
             costs_.step_ms(decode_tokens, batch_tokens - decode_tokens), phases);
  }
  metrics_.observe_step(decode_tokens, batch_tokens - decode_tokens, step_seconds, phases);
  costs_.learn_step(decode_tokens, batch_tokens - decode_tokens, step_seconds * 1000.0);
  return status;
}

// The tokens this step's decode put in each sequence's cells, for the prefix tree; before the
// plan is committed, so they start at each sequence's kv_tokens().
void StepExecutor::record_computed_cells(const StepPlan& plan) {
  for (const StepPlan::Entry& entry : plan.entries()) {
    const Sequence& sequence = *entry.sequence;
    computed_.clear();
    for (int i = 0; i < entry.tokens; ++i) {
      computed_.push_back(sequence.token_at(static_cast<size_t>(sequence.kv_tokens() + i)));
    }
    kv_.record(sequence.slot(), computed_);
  }
}

// Draws every sequence's next token; the sequences' samplers are independent, so the draws run
// in parallel and a step's sampling time does not grow as vocabulary x sequences on one thread.
void StepExecutor::sample(const StepPlan& plan) {
  to_sample_.clear();
  sample_logits_.clear();
  for (const StepPlan::Entry& entry : plan.entries()) {
    if (entry.logits_index < 0 || entry.sequence->finished()) continue;
    to_sample_.push_back(entry.sequence);
    sample_logits_.push_back(engine_.logits(entry.logits_index));
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
void StepExecutor::commit_samples() {
  for (size_t i = 0; i < to_sample_.size(); ++i) {
    to_sample_[i]->accept_token(std::move(samples_[i]), clock_(), engine_, metrics_);
  }
}

}  // namespace brisk
