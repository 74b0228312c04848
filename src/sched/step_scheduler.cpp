#include "sched/step_scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace brisk {

StepScheduler::StepScheduler(ModelRunner& engine, SchedulerOptions options, ServingMetrics& metrics,
                             ReportSink report)
    : engine_(engine),
      options_(options),
      metrics_(metrics),
      report_(std::move(report)),
      planner_(options,
               StepPlanner::KvShape{engine.context_size(), std::max(1, engine.context_size() / 100),
                                    engine.sequence_context_size() == engine.context_size()}),
      kv_(engine, options.max_seqs, engine.sequence_ids(), options.prefix_cache, metrics),
      find_prefix_([this](const KvLedger& ledger, std::span<const Token> tokens,
                          bool shared_prompt) {
        return kv_.lookup_in(ledger, tokens, shared_prompt);
      }),
      costs_(options.max_step_ms, options.max_batched_tokens, options.min_prefill_step_tokens,
             options.min_alone_chunk_tokens),
      executor_(engine, kv_, costs_, metrics, options.sampling_threads, options.clock,
                !options.quiet) {}

WarmupResult StepScheduler::warm_up() {
  // Chunks nearer a burst's full steps than the small ones beside decodes (dearer per token),
  // small enough that the warm-up stays a fraction of a second on a CPU.
  constexpr int kWarmupChunkTokens = 128;
  const WarmupResult result = warm_up_step_costs(
      engine_, costs_, options_.max_seqs, std::min(options_.max_batched_tokens, kWarmupChunkTokens),
      options_.clock);
  report();
  return result;
}

void StepScheduler::adopt_step_costs(const StepCostTable& table) {
  costs_.adopt(table);
  report();
}

void StepScheduler::enqueue(std::shared_ptr<Request> request) {
  state_.queued_prompt_tokens += queued_prefill_tokens(*request);
  state_.waiting.push_back(std::move(request));
}

void StepScheduler::cancel_all() {
  for (auto& sequence : state_.running) sequence->finish(FinishReason::cancelled, now(), metrics_);
  release_finished();
  for (auto& sequence : state_.preempted) sequence->finish(FinishReason::cancelled, now(), metrics_);
  state_.preempted.clear();
  std::deque<std::shared_ptr<Request>> abandoned;
  abandoned.swap(state_.waiting);
  state_.queued_prompt_tokens = 0;
  for (auto& request : abandoned) finish_unscheduled(*request, FinishReason::cancelled);
  report();
}

// The planner decides from the state and acts on nothing; the decision is applied and its batch
// run. A plan the decode refused (no KV room) moved nothing: the planner decides again from
// there (cached prefixes give way, else a request is preempted), without admitting anyone
// (that would refill the room just made).
void StepScheduler::step() {
  const TimePoint step_started = now();
  reap_cancelled();
  StepPlanner::Start start = StepPlanner::Start::step;
  for (;;) {
    StepDecision decision = decide(start);
    apply(decision);
    if (plan_.empty()) break;
    const DecodeStatus status = executor_.run(plan_, step_started);
    if (status == DecodeStatus::no_kv_space &&
        ((planner_.kv_shape().shared && kv_.cached_sequences() > 0) ||
         state_.running.size() > 1)) {
      start = StepPlanner::Start::after_no_room;
      continue;
    }
    if (status != DecodeStatus::ok) {
      fail_batch(status == DecodeStatus::no_kv_space
                     ? "the KV cache is full (raise --ctx-size or lower --max-seqs)"
                     : "the engine failed to decode this batch");
    }
    break;
  }
  plan_.clear();  // its sequences may be released below
  release_finished();
}

StepDecision StepScheduler::decide(StepPlanner::Start start) const {
  return planner_.decide(state_, kv_.ledger(), find_prefix_, costs_, now(), start);
}

void StepScheduler::apply(StepDecision& decision) {
  KvManager::Adopted kv;
  if (decision.ledger) kv = kv_.adopt(std::move(*decision.ledger), decision.kv_ops);
  for (uint64_t order : decision.preemptions) preempt(order, kv.saved);
  // The queue's requests leave it before any is admitted: admissions name them by index.
  std::vector<std::shared_ptr<Request>> admitted(decision.admissions.size());
  std::vector<int> taken;
  for (size_t i = 0; i < decision.admissions.size(); ++i) {
    const int index = decision.admissions[i].waiting_index;
    if (index < 0) continue;
    admitted[i] = state_.waiting[static_cast<size_t>(index)];
    state_.queued_prompt_tokens -= queued_prefill_tokens(*admitted[i]);
    taken.push_back(index);
  }
  std::sort(taken.rbegin(), taken.rend());
  for (int index : taken) state_.waiting.erase(state_.waiting.begin() + index);
  for (size_t i = 0; i < decision.admissions.size(); ++i) {
    admit(decision.admissions[i], std::move(admitted[i]), kv.failed_restores);
  }
  state_.next_admission_order = decision.next_admission_order;
  state_.long_prefill_stepped_aside = decision.long_stepped_aside;
  if (decision.pass) {
    last_pass_ = std::move(*decision.pass);
    if (!state_.preempted.empty() || !state_.waiting.empty()) {
      metrics_.count_admission_block(last_pass_.blocked);
    }
  }
  last_pass_.preempted_after.insert(last_pass_.preempted_after.end(),
                                    decision.preempted_after_pass.begin(),
                                    decision.preempted_after_pass.end());
  // Until the step's end reports the whole picture, a newcomer's forecast sees these.
  if (!decision.admissions.empty()) report();
  plan_ = std::move(decision.plan);
  plan_.bind([this](uint64_t order) {
    const auto at = std::lower_bound(
        state_.running.begin(), state_.running.end(), order,
        [](const auto& sequence, uint64_t o) { return sequence->admission_order() < o; });
    return at->get();
  });
  // The step is learned as run at the cells the planner priced it at.
  costs_.set_attended_cells(kv_.attended_cells());
}

// The sequence gives up its cells and sequence id (the ledger's operations did) and waits, ahead
// of every request not yet started, to recompute them.
void StepScheduler::preempt(uint64_t order, const std::vector<int>& saved_ids) {
  const auto at = std::find_if(state_.running.begin(), state_.running.end(),
                               [&](const auto& s) { return s->admission_order() == order; });
  std::unique_ptr<Sequence> victim = std::move(*at);
  state_.running.erase(at);
  const bool swapped =
      std::find(saved_ids.begin(), saved_ids.end(), victim->slot()) != saved_ids.end();
  if (!options_.quiet) {
    spdlog::debug("preempting request {} ({} KV cells, {} tokens generated; {})",
                  victim->request().id, victim->kv_tokens(), victim->completion_tokens(),
                  swapped ? "saved to the host tier" : "to be recomputed");
  }
  victim->preempt();
  metrics_.count_preemption();
  if (swapped) metrics_.count_preemption_swap();
  const auto place = std::find_if(
      state_.preempted.begin(), state_.preempted.end(),
      [&](const auto& other) { return other->admission_order() > victim->admission_order(); });
  state_.preempted.insert(place, std::move(victim));
}

// Gives the sequence its sequence id and the cached prefix it starts from, and its place in
// admission order; the plan gives it its prompt chunks.
void StepScheduler::admit(const StepDecision::Admission& admission,
                          std::shared_ptr<Request> request,
                          const std::vector<int>& failed_restores) {
  std::unique_ptr<Sequence> sequence;
  if (request) {
    sequence = std::make_unique<Sequence>(std::move(request), -1, now(), admission.order);
  } else {
    const auto at = std::find_if(state_.preempted.begin(), state_.preempted.end(), [&](const auto& s) {
      return s->admission_order() == admission.order;
    });
    sequence = std::move(*at);
    state_.preempted.erase(at);
  }
  const PrefixLookup& hit = admission.hit;
  const bool restore_failed =
      hit.from_host && std::find(failed_restores.begin(), failed_restores.end(), admission.id) !=
                           failed_restores.end();
  const int reused = restore_failed ? 0 : admission.reused;
  metrics_.observe_prefix_lookup(
      admission.query_tokens, reused,
      prefix_miss_name(hit.from_host ? PrefixMiss::restore_failed : hit.miss));
  sequence->assign_slot(admission.id);
  sequence->reuse_cached_prefix(reused);
  if (!options_.quiet) {
    spdlog::trace("admitted #{} into sequence {} {:.1f} ms after its arrival: {} tokens to prefill",
                  sequence->admission_order(), admission.id,
                  ms_between(sequence->request().arrival, now()), sequence->prompt_remaining());
  }
  const auto at = std::find_if(state_.running.begin(), state_.running.end(), [&](const auto& other) {
    return other->admission_order() > sequence->admission_order();
  });
  state_.running.insert(at, std::move(sequence));
}

// Ends what nobody waits for any more: requests whose client went away, and requests whose
// first token is past its deadline (never computed further).
void StepScheduler::reap_cancelled() {
  const TimePoint now = this->now();
  const auto expired = [&](const Request& request) {
    return request.deadline_ms > 0 && ms_between(request.arrival, now) > request.deadline_ms;
  };
  const auto end_if_abandoned = [&](Sequence& sequence) {
    if (sequence.request().cancelled.load()) {
      sequence.finish(FinishReason::cancelled, now, metrics_);
    } else if (sequence.completion_tokens() == 0 && expired(sequence.request())) {
      sequence.finish(FinishReason::deadline, now, metrics_, deadline_message(sequence.request()));
    }
  };
  for (auto& sequence : state_.running) end_if_abandoned(*sequence);
  release_finished();
  for (auto& sequence : state_.preempted) end_if_abandoned(*sequence);
  std::erase_if(state_.preempted, [](const auto& sequence) { return sequence->finished(); });
  std::vector<std::shared_ptr<Request>> ended;
  for (auto it = state_.waiting.begin(); it != state_.waiting.end();) {
    if ((*it)->cancelled.load() || expired(**it)) {
      state_.queued_prompt_tokens -= queued_prefill_tokens(**it);
      ended.push_back(std::move(*it));
      it = state_.waiting.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& request : ended) {
    if (request->cancelled.load()) {
      finish_unscheduled(*request, FinishReason::cancelled);
    } else {
      finish_unscheduled(*request, FinishReason::deadline, deadline_message(*request));
    }
  }
}

std::string StepScheduler::deadline_message(const Request& request) {
  return fmt::format(
      "the request's deadline of {:.0f} ms passed before its first token; it was dropped "
      "without being computed (raise deadline_ms, or retry when the server is less busy)",
      request.deadline_ms);
}

void StepScheduler::fail_running(const std::string& what) {
  plan_.clear();  // the step that threw may have left one
  spdlog::error("engine step failed: {}; ending the {} running requests", what, state_.running.size());
  const std::string error = "the server failed while generating this response; it has been logged";
  for (auto& sequence : state_.running) {
    if (!sequence->finished()) sequence->finish(FinishReason::error, now(), metrics_, error);
  }
  release_finished();
}

void StepScheduler::fail_batch(const std::string& error) {
  spdlog::error("step of {} tokens failed: {}", engine_.batch_size(), error);
  for (const StepPlan::Entry& entry : plan_.entries()) {
    entry.sequence->finish(FinishReason::error, now(), metrics_, error);
  }
}

// Frees the KV cells and slot of every finished sequence, so the next step can reuse them.
void StepScheduler::release_finished() {
  for (auto& sequence : state_.running) {
    if (!sequence->finished()) continue;
    const FinishReason reason = sequence->finish_reason();
    if (reason != FinishReason::stop && reason != FinishReason::length) {
      kv_.release(sequence->slot());
      continue;
    }
    kv_.retire(sequence->slot());
    constexpr double kWeight = 0.1;
    const double generated = sequence->completion_tokens();
    mean_output_tokens_ = mean_output_tokens_ <= 0
                              ? generated
                              : mean_output_tokens_ + kWeight * (generated - mean_output_tokens_);
  }
  std::erase_if(state_.running, [](const auto& sequence) { return sequence->finished(); });
  report();
}

void StepScheduler::finish_unscheduled(Request& request, FinishReason reason, std::string error) {
  request.prompt_ready_to_share = true;  // the choices waiting for its prompt go on alone
  RequestTimings timings;
  timings.e2e_ms = ms_between(request.arrival, now());
  timings.queue_ms = timings.e2e_ms;
  timings.prompt_tokens = static_cast<int>(request.prompt_tokens.size());
  metrics_.observe_finished(timings, reason);
  GenerationUpdate update;
  update.finish_reason = reason;
  update.error = std::move(error);
  update.timings = timings;
  request.on_update(std::move(update));
}

}  // namespace brisk
