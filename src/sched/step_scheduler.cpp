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
      kv_capacity_tokens_(engine.context_size()),
      kv_watermark_tokens_(std::max(1, engine.context_size() / 100)),
      kv_shared_(engine.sequence_context_size() == engine.context_size()),
      kv_(engine, options.max_seqs, engine.sequence_ids(), options.prefix_cache, metrics),
      policy_(options.queue_policy),
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
  queued_prompt_tokens_ += queued_prefill_tokens(*request);
  waiting_.push_back(std::move(request));
}

void StepScheduler::cancel_all() {
  for (auto& sequence : running_) sequence->finish(FinishReason::cancelled, now(), metrics_);
  release_finished();
  for (auto& sequence : preempted_) sequence->finish(FinishReason::cancelled, now(), metrics_);
  preempted_.clear();
  std::deque<std::shared_ptr<Request>> abandoned;
  abandoned.swap(waiting_);
  queued_prompt_tokens_ = 0;
  for (auto& request : abandoned) finish_unscheduled(*request, FinishReason::cancelled);
  report();
}

// A step acts first — preemption for priority, room for the decodes, admission, room for the
// prompts — and then plans from the state it left (plan_step acts on nothing); the executor
// runs the plan. A plan the decode refused (no KV room) moved nothing: room is made and the step
// planned again, without admitting anyone (that would refill the room just made).
void StepScheduler::step() {
  const TimePoint step_started = now();
  reap_cancelled();
  bool admit = true;
  for (;;) {
    if (admit && !has_running_room()) preempt_for_priority(now());
    make_room_for_decodes();
    if (admit) admit_waiting();
    PlannedStep planned = plan_at_current_cells();
    // Cached prefixes give way to a running prompt.
    while (planned.prompts_want_cells && kv_.evict_oldest()) planned = plan_at_current_cells();
    plan_ = std::move(planned.plan);
    long_prefill_stepped_aside_ = planned.long_stepped_aside;
    if (plan_.empty()) break;
    const DecodeStatus status = executor_.run(plan_, step_started);
    if (status == DecodeStatus::no_kv_space &&
        ((kv_shared_ && kv_.cached_sequences() > 0) || running_.size() > 1)) {
      // Cached prefixes first: in one buffer their cells are the running ones' room.
      if (!kv_shared_ || !kv_.evict_oldest()) preempt_one();
      admit = false;
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

// In one buffer each decode takes a cell: cached prefixes go first, then the latest-arrived
// running requests make room for the others.
void StepScheduler::make_room_for_decodes() {
  if (!kv_shared_) return;
  for (;;) {
    if (decoding_sequences() <= kv_capacity_tokens_ - kv_.used_cells()) return;
    if (!kv_.evict_oldest()) {
      if (running_.size() <= 1) return;
      preempt_one();
    }
  }
}

// Every cost the plan reads is priced at the KV cells its rows attend over as the cache stands:
// admission, an eviction or a preemption just changed them.
StepScheduler::PlannedStep StepScheduler::plan_at_current_cells() {
  costs_.set_attended_cells(kv_.attended_cells());
  return plan_step();
}

// Decodes first: every running stream gets its next token in this step; then prompt chunks of
// the running requests (the newly admitted among them), short ones oldest first, then long ones
// with what is left. Reads the state only: planning twice gives the same plan.
StepScheduler::PlannedStep StepScheduler::plan_step() const {
  PlannedStep out;
  StepPlan& plan = out.plan;
  int kv_free = kv_free_cells(plan);
  for (const auto& sequence : running_) {
    if (!sequence->prefill_done()) continue;
    plan.add_decode(*sequence);
    --kv_free;
  }
  const int decode_tokens = plan.decode_tokens();
  // --target-itl-ms holds while a long prompt is being prefilled (what stalls streams for
  // seconds) or while the prompts waiting fit in one step. When more short prompts wait than a
  // step can carry (a burst), they keep the whole token budget: spread over many small steps
  // they left the batch half empty, and a 16-stream burst lost throughput (BENCHMARKS.md).
  bool long_prefill_running = false;
  int prompt_backlog = 0;
  for (const auto& sequence : running_) {
    long_prefill_running = long_prefill_running || is_long_prefill(*sequence);
    prompt_backlog += sequence->prompt_remaining();
  }
  prompt_backlog += queued_prompt_tokens_;
  const int token_budget = options_.max_batched_tokens - decode_tokens;
  int budget = long_prefill_running || prompt_backlog <= token_budget
                   ? costs_.prefill_budget(decode_tokens)
                   : token_budget;
  const int step_budget = budget;
  for (const auto& sequence : running_) {
    if (budget <= 0) break;
    if (sequence->prefill_done() || is_long_prefill(*sequence)) continue;
    add_prefill(out, *sequence, budget, kv_free);
  }
  out.budget_for_newcomers = budget;
  const int short_tokens = step_budget - budget;
  // A step that carries short prompts carries no long chunk, so their first tokens cost their
  // own prefill only (with a chunk filling the step beside them, short newcomers waited ~80% of
  // a 320-token prefill: brisk doctor's head_of_line_blocking). The long prompt steps aside for
  // one step, never two in a row, and then gets at least a quarter of a step's chunk: a steady
  // stream of short prompts that fills every step cannot starve it. While nothing decodes, a
  // long chunk is cut to the target too (StepCosts::long_chunk_budget): short requests that
  // arrive during its step wait for all of it.
  const bool long_steps_aside = short_tokens > 0 && !long_prefill_stepped_aside_;
  const int timed_tokens = costs_.long_chunk_budget(decode_tokens);
  int long_budget = long_steps_aside
                        ? 0
                        : std::min(budget, std::max(timed_tokens - short_tokens, timed_tokens / 4));
  out.long_stepped_aside = long_steps_aside && long_prefill_running;
  int long_prefills = 0;
  for (const auto& sequence : running_) {
    if (long_budget <= 0 || long_prefills >= options_.max_long_prefills) break;
    if (sequence->prefill_done() || !is_long_prefill(*sequence)) continue;
    add_prefill(out, *sequence, long_budget, kv_free);
    ++long_prefills;
  }
  return out;
}

bool StepScheduler::is_long_prompt(int tokens_to_prefill) const {
  return options_.long_prefill_tokens > 0 && tokens_to_prefill > options_.long_prefill_tokens;
}

bool StepScheduler::is_long_prefill(const Sequence& sequence) const {
  return !sequence.prefill_done() && is_long_prompt(sequence.prefill_work_tokens());
}

// The sequence's next chunk: as much of its prompt as the budget and the free cells allow.
void StepScheduler::add_prefill(PlannedStep& out, Sequence& sequence, int& budget,
                                int& kv_free) const {
  const int wanted = std::min(budget, sequence.prompt_remaining());
  const int chunk = std::min(wanted, kv_free);
  if (kv_shared_ && chunk < wanted) out.prompts_want_cells = true;
  if (chunk <= 0) return;
  out.plan.add_prefill(sequence, chunk);
  budget -= chunk;
  kv_free -= chunk;
}

int StepScheduler::kv_free_cells(const StepPlan& plan) const {
  if (!kv_shared_) return kv_capacity_tokens_;  // each sequence has its own share
  return kv_capacity_tokens_ - kv_.used_cells() - plan.tokens();
}

// The running sequence to preempt when room runs out: the latest-arrived, or under --policy
// priority the lowest-ranked (then the latest).
size_t StepScheduler::preemption_victim() const {
  size_t victim = running_.size() - 1;
  if (policy_.policy() != SchedulingPolicy::priority) return victim;
  for (size_t i = running_.size(); i-- > 0;) {
    if (running_[i]->request().priority > running_[victim]->request().priority) victim = i;
  }
  return victim;
}

void StepScheduler::preempt_one() { preempt(preemption_victim()); }

// The sequence gives up its cells and sequence id and waits, ahead of every request not yet
// started, to recompute them.
void StepScheduler::preempt(size_t index) {
  std::unique_ptr<Sequence> victim = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  const bool swapped = kv_.swap_out(victim->slot());
  if (!options_.quiet) {
    spdlog::debug("preempting request {} ({} KV cells, {} tokens generated; {})",
                  victim->request().id, victim->kv_tokens(), victim->completion_tokens(),
                  swapped ? "saved to the host tier" : "to be recomputed");
  }
  victim->preempt();
  last_pass_.preempted_after.push_back(&victim->request_ref());
  metrics_.count_preemption();
  if (swapped) metrics_.count_preemption_swap();
  const auto at = std::find_if(preempted_.begin(), preempted_.end(), [&](const auto& other) {
    return other->admission_order() > victim->admission_order();
  });
  preempted_.insert(at, std::move(victim));
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
  for (auto& sequence : running_) end_if_abandoned(*sequence);
  release_finished();
  for (auto& sequence : preempted_) end_if_abandoned(*sequence);
  std::erase_if(preempted_, [](const auto& sequence) { return sequence->finished(); });
  std::vector<std::shared_ptr<Request>> ended;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled.load() || expired(**it)) {
      queued_prompt_tokens_ -= queued_prefill_tokens(**it);
      ended.push_back(std::move(*it));
      it = waiting_.erase(it);
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

// Preempted sequences first (under --policy priority, unless a waiting request ranks higher),
// then the queue in the policy's order (docs/scheduling.md); the one chosen waits for room
// rather than being overtaken by smaller ones. A request is admitted when what its prompt (or
// replay) still needs after the prefix cache's hit fits beside what the running ones hold or
// will hold once their prompts are in, plus a watermark for their next tokens; cached prefixes
// are evicted for it when that makes it fit. Alone, any request fits (its length was checked).
void StepScheduler::admit_waiting() {
  const size_t running_before = running_.size();
  admit_pass();
  if (!preempted_.empty() || !waiting_.empty()) metrics_.count_admission_block(last_pass_.blocked);
  // Until the step's end reports the whole picture, a newcomer's estimate sees these.
  if (running_.size() != running_before) report();
}

// Newcomers get what the running requests leave of this step's token budget (a draft of the
// step's plan says how much), each short one its first chunk of it.
void StepScheduler::admit_pass() {
  const PlannedStep draft = plan_at_current_cells();
  int budget = draft.budget_for_newcomers;
  int newcomer_tokens = 0;  // the newcomers' first chunks
  const auto start = [&](std::unique_ptr<Sequence> sequence, const PrefixLookup& hit) {
    Sequence& started = start_sequence(std::move(sequence), hit);
    const int kv_free =
        kv_shared_ ? kv_free_cells(draft.plan) - newcomer_tokens : kv_capacity_tokens_;
    // A long prompt waits for the pass after admission, so short ones admitted later in this
    // step still get their share of the budget.
    if (kv_free <= 0 || is_long_prefill(started)) return;
    const int chunk = std::min({budget, started.prompt_remaining(), kv_free});
    budget -= chunk;
    newcomer_tokens += chunk;
  };
  int committed = committed_kv_tokens();
  // Long prompts beyond --max-long-prefills would only hold a sequence while they wait for
  // their turn to prefill: short ones behind them in the queue go first. Long ones keep their
  // order among themselves, and each waits only while another long prompt is prefilled.
  // A later choice of an n > 1 request computes one token of its prompt (with a prefix cache).
  const auto is_long = [&](const Request& request) {
    return is_long_prompt(kv_.cache_enabled() ? queued_prefill_tokens(request)
                                              : static_cast<int>(request.prompt_tokens.size()));
  };
  int long_prefills = static_cast<int>(std::count_if(
      running_.begin(), running_.end(), [&](const auto& s) { return is_long_prefill(*s); }));
  const TimePoint now = this->now();
  last_pass_ = AdmissionPass{};
  const auto blocked = [&](AdmissionBlock why, const Request* stopped_at = nullptr) {
    last_pass_.blocked = why;
    last_pass_.stopped_at = stopped_at;
    last_pass_.long_prompts_wait = long_prefills >= options_.max_long_prefills;
  };
  while (budget > 0 && has_running_room()) {
    const auto resumed = next_preempted(now);
    std::shared_ptr<Request> request;
    PrefixLookup hit;
    {
      const bool short_only = long_prefills >= options_.max_long_prefills;
      const int index = policy_.pick(
          waiting_,
          [&](const Request& r) {
            return (!short_only || !is_long(r)) && !waits_for_first_choice(r);
          },
          is_long, now, costs_.prefill_ms_per_token());
      const bool waiting_first =
          index >= 0 && (resumed == preempted_.end() ||
                         (policy_.policy() == SchedulingPolicy::priority &&
                          policy_.runs_before(*waiting_[static_cast<size_t>(index)],
                                              (*resumed)->request(), now)));
      if (index < 0 && resumed == preempted_.end() && !waiting_.empty()) {
        const bool long_ones_wait =
            short_only && std::any_of(waiting_.begin(), waiting_.end(),
                                      [&](const auto& r) { return is_long(*r); });
        return blocked(long_ones_wait ? AdmissionBlock::long_prefill_turn
                                      : AdmissionBlock::first_choice_prefill);
      }
      if (waiting_first) {
        auto next = waiting_.begin() + index;
        const TokenList& prompt = (*next)->prompt_tokens;
        hit = (*next)->shares_prompt_of ? kv_.lookup_shared_prompt(prompt) : kv_.lookup(prompt);
        if (!make_room(static_cast<int>(prompt.size()) - hit.shared_cells(), hit.source, committed)) {
          return blocked(AdmissionBlock::kv_cache_full, next->get());
        }
        request = std::move(*next);
        waiting_.erase(next);
        if (is_long(*request)) ++long_prefills;
        queued_prompt_tokens_ -= queued_prefill_tokens(*request);
      }
    }
    if (request) {
      auto sequence =
          std::make_unique<Sequence>(std::move(request), -1, this->now(), next_admission_order_++);
      start(std::move(sequence), hit);
    } else {
      if (resumed == preempted_.end()) return;
      Sequence& next = **resumed;
      hit = kv_.lookup(next.prefill_tokens());
      if (!make_room(next.prompt_remaining() - hit.shared_cells(), hit.source, committed)) {
        return blocked(AdmissionBlock::kv_cache_full, &next.request_ref());
      }
      std::unique_ptr<Sequence> sequence = std::move(*resumed);
      preempted_.erase(resumed);
      start(std::move(sequence), hit);
    }
    committed = committed_kv_tokens();
  }
  blocked(budget <= 0 ? AdmissionBlock::step_budget : AdmissionBlock::no_free_sequence);
}

// The preempted sequence to resume next: the earliest admitted, or under --policy priority
// the best ranked.
std::deque<std::unique_ptr<Sequence>>::iterator StepScheduler::next_preempted(TimePoint now) {
  if (policy_.policy() != SchedulingPolicy::priority) return preempted_.begin();
  return std::min_element(preempted_.begin(), preempted_.end(), [&](const auto& a, const auto& b) {
    return policy_.runs_before(a->request(), b->request(), now);
  });
}

// --policy priority: with every sequence taken, a waiting request that ranks above a running
// one takes its place; the running one is preempted and resumes when its turn comes again.
bool StepScheduler::preempt_for_priority(TimePoint now) {
  if (policy_.policy() != SchedulingPolicy::priority || running_.empty()) return false;
  const size_t victim = preemption_victim();
  const Request& running = running_[victim]->request();
  const bool outranked = std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& waiting) {
    return policy_.effective_priority(*waiting, now) < policy_.effective_priority(running, now);
  });
  if (!outranked) return false;
  preempt(victim);
  return true;
}

// A later choice of an n > 1 request waits while its first choice prefills the prompt they
// share; without a prefix cache to share it through, it prefills its own copy at once.
bool StepScheduler::waits_for_first_choice(const Request& request) const {
  return kv_.cache_enabled() && request.shares_prompt_of &&
         !request.shares_prompt_of->prompt_ready_to_share;
}

bool StepScheduler::has_running_room() const {
  return static_cast<int>(running_.size()) < options_.max_seqs;
}

// Whether `needed` more cells fit beside `committed` and the watermark, evicting cached
// prefixes (least recently used first, never `keep`: the newcomer's own hit) when that is
// enough; evicts nothing when it is not. A request alone is always let in, after the cached
// prefixes it needs the room of are evicted (a state restored from the host tier needs all of
// its cells at once).
bool StepScheduler::make_room(int needed, int keep, int& committed) {
  if (!kv_shared_) return true;
  const int room = kv_capacity_tokens_ - kv_watermark_tokens_;
  if (committed + needed <= room) return true;
  const bool alone = running_.empty();
  if (!alone && committed - kv_.evictable_cells(keep) + needed > room) return false;
  while (committed + needed > room && kv_.evict_oldest(keep)) {
    committed = committed_kv_tokens();
  }
  return alone || committed + needed <= room;
}

// Gives the sequence a sequence id (with the cells of its prefix-cache hit) and its place in
// arrival order; the plan gives it its prompt chunks.
Sequence& StepScheduler::start_sequence(std::unique_ptr<Sequence> sequence,
                                        const PrefixLookup& hit) {
  const int id = kv_.acquire(hit);
  sequence->assign_slot(id);
  sequence->reuse_cached_prefix(kv_.attach(id, hit, sequence->prefill_tokens()));
  Sequence& started = *sequence;
  if (!options_.quiet) {
    spdlog::trace("admitted #{} into sequence {} {:.1f} ms after its arrival: {} tokens to prefill",
                  started.admission_order(), id, ms_between(started.request().arrival, now()),
                  started.prompt_remaining());
  }
  const auto at = std::find_if(running_.begin(), running_.end(), [&](const auto& other) {
    return other->admission_order() > started.admission_order();
  });
  running_.insert(at, std::move(sequence));
  return started;
}

void StepScheduler::fail_running(const std::string& what) {
  plan_.clear();  // the step that threw may have left one
  spdlog::error("engine step failed: {}; ending the {} running requests", what, running_.size());
  const std::string error = "the server failed while generating this response; it has been logged";
  for (auto& sequence : running_) {
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
  for (auto& sequence : running_) {
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
  std::erase_if(running_, [](const auto& sequence) { return sequence->finished(); });
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

// Cells held (cached prefixes included) or taken by this step's decodes, and the prompt tokens
// the running sequences still have to put in (a planned chunk among them).
int StepScheduler::committed_kv_tokens() const {
  int committed = kv_.used_cells() + decoding_sequences();
  for (const auto& sequence : running_) committed += sequence->prompt_remaining();
  return committed;
}

// The running sequences whose prompt is in: each decodes a token this step.
int StepScheduler::decoding_sequences() const {
  return static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                        [](const auto& s) { return s->prefill_done(); }));
}

}  // namespace brisk
