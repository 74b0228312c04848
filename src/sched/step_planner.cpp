#include "sched/step_planner.h"

#include <algorithm>

namespace brisk {

StepPlanner::StepPlanner(const SchedulerOptions& options, KvShape kv)
    : options_(options), kv_(kv), policy_(options.queue_policy) {}

// One decision in the making: the planner's view of every sequence as the decision leaves it,
// and a copy of the KV ledger taken at its first change. Nothing of the state is touched.
class StepPlanner::Planning {
 public:
  Planning(const StepPlanner& planner, const SchedulerState& state, const KvLedger& ledger,
           const PrefixFinder& find, const StepCosts& costs, TimePoint now, StepDecision& out)
      : planner_(planner),
        options_(planner.options_),
        kv_(planner.kv_),
        state_(state),
        base_ledger_(ledger),
        find_(find),
        costs_(costs),
        now_(now),
        out_(out),
        queued_prompt_tokens_(state.queued_prompt_tokens) {
    out_.next_admission_order = state.next_admission_order;
    for (const auto& sequence : state.running) running_.push_back(seat_of(*sequence));
    for (const auto& sequence : state.preempted) preempted_.push_back(seat_of(*sequence));
  }

  void step() {
    if (!has_running_room()) preempt_for_priority();
    make_room_for_decodes();
    admit();
    plan();
  }

  void after_no_room() {
    pass_started_ = true;  // its preemptions come after the last step's admission pass
    // Cached prefixes first: in one buffer their cells are the running ones' room.
    if (!kv_.shared || !evict_oldest(-1)) preempt_one();
    make_room_for_decodes();
    plan();
  }

 private:
  // A sequence as the decision leaves it.
  struct Seat {
    uint64_t order = 0;
    const Request* request = nullptr;
    Sequence* live = nullptr;  // null: a queued request this decision admits
    int slot = -1;
    int prefill_target = 0;  // tokens its prefill puts in the cache: the prompt or a replay
    int prompt_remaining = 0;
    int prefill_work = 0;  // tokens this prefill computes from its start
    TokenList replay;      // preempted by this decision: what it recomputes
    bool prefill_done() const { return prompt_remaining == 0; }
  };
  // A step's plan, and what it says of the state it was planned from.
  struct PlannedStep {
    StepPlan plan;
    int budget_for_newcomers = 0;  // tokens left after the decodes and running short prompts
    // A prompt chunk got fewer tokens than the budget allowed, for want of free cells (one
    // buffer): cached prefixes may give way.
    bool prompts_want_cells = false;
    bool long_stepped_aside = false;  // its long chunk gave way to short prompts
  };

  static Seat seat_of(Sequence& sequence) {
    Seat seat;
    seat.order = sequence.admission_order();
    seat.request = &sequence.request_ref();
    seat.live = &sequence;
    seat.slot = sequence.slot();
    seat.prompt_remaining = sequence.prompt_remaining();
    seat.prefill_target = static_cast<int>(sequence.prefill_tokens().size());
    seat.prefill_work = sequence.prefill_work_tokens();
    return seat;
  }

  const KvLedger& ledger() const { return out_.ledger ? *out_.ledger : base_ledger_; }
  KvLedger& changed_ledger() {
    if (!out_.ledger) out_.ledger.emplace(base_ledger_);
    return *out_.ledger;
  }

  std::span<const Token> prefill_tokens(const Seat& seat) const {
    if (!seat.replay.empty()) return seat.replay;
    if (seat.live) return seat.live->prefill_tokens();
    return seat.request->prompt_tokens;
  }

  bool has_running_room() const { return static_cast<int>(running_.size()) < options_.max_seqs; }
  bool is_long_prefill(const Seat& seat) const {
    return !seat.prefill_done() && planner_.is_long_prompt(seat.prefill_work);
  }
  int decoding_sequences() const {
    return static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                          [](const Seat& s) { return s.prefill_done(); }));
  }
  // Cells held (cached prefixes included) or taken by this step's decodes, and the prompt
  // tokens the running sequences still have to put in (a planned chunk among them).
  int committed_kv_tokens() const {
    int committed = ledger().used_cells() + decoding_sequences();
    for (const Seat& seat : running_) committed += seat.prompt_remaining;
    return committed;
  }
  int kv_free_cells(const StepPlan& plan) const {
    if (!kv_.shared) return kv_.capacity_cells;  // each sequence has its own share
    return kv_.capacity_cells - ledger().used_cells() - plan.tokens();
  }

  bool evict_oldest(int keep) {
    if (ledger().cached_sequences() == 0) return false;
    return changed_ledger().evict_oldest(keep, out_.kv_ops);
  }

  // The running sequence to preempt when room runs out: the latest-arrived, or under --policy
  // priority the lowest-ranked (then the latest).
  size_t preemption_victim() const {
    size_t victim = running_.size() - 1;
    if (planner_.policy_.policy() != SchedulingPolicy::priority) return victim;
    for (size_t i = running_.size(); i-- > 0;) {
      if (running_[i].request->priority > running_[victim].request->priority) victim = i;
    }
    return victim;
  }
  void preempt_one() { preempt(preemption_victim()); }

  // The sequence gives up its cells and sequence id and waits, ahead of every request not yet
  // started, to recompute them.
  void preempt(size_t index) {
    Seat seat = std::move(running_[index]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
    changed_ledger().swap_out(seat.slot, out_.kv_ops);
    out_.preemptions.push_back(seat.order);
    if (pass_started_) out_.preempted_after_pass.push_back(seat.request);
    if (seat.live) seat.replay = seat.live->replay_tokens();
    else seat.replay = seat.request->prompt_tokens;  // admitted and preempted in one decision
    seat.prefill_target = static_cast<int>(seat.replay.size());
    seat.prompt_remaining = seat.prefill_target;
    seat.prefill_work = seat.prefill_target;
    seat.slot = -1;
    const auto at = std::find_if(preempted_.begin(), preempted_.end(),
                                 [&](const Seat& other) { return other.order > seat.order; });
    preempted_.insert(at, std::move(seat));
  }

  // --policy priority: with every sequence taken, a waiting request that ranks above a running
  // one takes its place; the running one is preempted and resumes when its turn comes again.
  void preempt_for_priority() {
    const QueuePolicy& policy = planner_.policy_;
    if (policy.policy() != SchedulingPolicy::priority || running_.empty()) return;
    const size_t victim = preemption_victim();
    const Request& running = *running_[victim].request;
    bool outranked = false;
    for (size_t i = 0; i < state_.waiting.size() && !outranked; ++i) {
      outranked = policy.effective_priority(*state_.waiting[i], now_) <
                  policy.effective_priority(running, now_);
    }
    if (outranked) preempt(victim);
  }

  // In one buffer each decode takes a cell: cached prefixes go first, then the latest-arrived
  // running requests make room for the others.
  void make_room_for_decodes() {
    if (!kv_.shared) return;
    for (;;) {
      if (decoding_sequences() <= kv_.capacity_cells - ledger().used_cells()) return;
      if (!evict_oldest(-1)) {
        if (running_.size() <= 1) return;
        preempt_one();
      }
    }
  }

  // Whether `needed` more cells fit beside `committed` and the watermark, evicting cached
  // prefixes (least recently used first, never `keep`: the newcomer's own hit) when that is
  // enough; evicts nothing when it is not. A request alone is always let in, after the cached
  // prefixes it needs the room of are evicted (a state restored from the host tier needs all
  // of its cells at once).
  bool make_room(int needed, int keep, int& committed) {
    if (!kv_.shared) return true;
    const int room = kv_.capacity_cells - kv_.watermark_cells;
    if (committed + needed <= room) return true;
    const bool alone = running_.empty();
    if (!alone && committed - ledger().evictable_cells(keep) + needed > room) return false;
    while (committed + needed > room && evict_oldest(keep)) committed = committed_kv_tokens();
    return alone || committed + needed <= room;
  }

  // Gives the sequence a sequence id (with the cells of its prefix-cache hit) and its place in
  // admission order; the plan gives it its prompt chunks.
  Seat& start(Seat seat, const PrefixLookup& hit, int waiting_index) {
    KvLedger& kv = changed_ledger();
    StepDecision::Admission admission;
    admission.waiting_index = waiting_index;
    admission.order = seat.order;
    admission.hit = hit;
    admission.id = kv.acquire(hit, out_.kv_ops);
    const std::span<const Token> tokens = prefill_tokens(seat);
    admission.query_tokens = static_cast<int>(tokens.size());
    admission.reused = kv.attach(admission.id, hit, tokens, out_.kv_ops);
    out_.admissions.push_back(admission);
    seat.slot = admission.id;
    seat.prompt_remaining = seat.prefill_target - admission.reused;
    seat.prefill_work = seat.prompt_remaining;
    const auto at = std::find_if(running_.begin(), running_.end(),
                                 [&](const Seat& other) { return other.order > seat.order; });
    return *running_.insert(at, std::move(seat));
  }

  // Preempted sequences first (under --policy priority, unless a waiting request ranks
  // higher), then the queue in the policy's order (docs/scheduling.md); the one chosen waits
  // for room rather than being overtaken by smaller ones. A request is admitted when what its
  // prompt (or replay) still needs after the prefix cache's hit fits beside what the running
  // ones hold or will hold once their prompts are in, plus a watermark for their next tokens;
  // cached prefixes are evicted for it when that makes it fit. Alone, any request fits (its
  // length was checked). Newcomers get what the running requests leave of this step's token
  // budget (a draft of the step's plan says how much), each short one its first chunk of it.
  void admit() {
    AdmissionPass& pass = out_.pass.emplace();
    pass_started_ = true;
    const PlannedStep draft = plan_at_current_cells();
    int budget = draft.budget_for_newcomers;
    int newcomer_tokens = 0;  // the newcomers' first chunks
    const auto started = [&](Seat& seat) {
      const int kv_free =
          kv_.shared ? kv_free_cells(draft.plan) - newcomer_tokens : kv_.capacity_cells;
      // A long prompt waits for the pass after admission, so short ones admitted later in this
      // step still get their share of the budget.
      if (kv_free <= 0 || is_long_prefill(seat)) return;
      const int chunk = std::min({budget, seat.prompt_remaining, kv_free});
      budget -= chunk;
      newcomer_tokens += chunk;
    };
    const bool cache_enabled = ledger().cache_enabled();
    int committed = committed_kv_tokens();
    // Long prompts beyond --max-long-prefills would only hold a sequence while they wait for
    // their turn to prefill: short ones behind them in the queue go first. Long ones keep
    // their order among themselves, and each waits only while another long prompt is
    // prefilled. A later choice of an n > 1 request computes one token of its prompt (with a
    // prefix cache).
    const auto is_long = [&](const Request& request) {
      return planner_.is_long_prompt(cache_enabled
                                         ? queued_prefill_tokens(request)
                                         : static_cast<int>(request.prompt_tokens.size()));
    };
    int long_prefills = static_cast<int>(std::count_if(
        running_.begin(), running_.end(), [&](const Seat& s) { return is_long_prefill(s); }));
    const QueuePolicy& policy = planner_.policy_;
    const auto blocked = [&](AdmissionBlock why, const Request* stopped_at = nullptr) {
      pass.blocked = why;
      pass.stopped_at = stopped_at;
      pass.long_prompts_wait = long_prefills >= options_.max_long_prefills;
    };
    // The queue's requests this decision admitted (by address; a few at most).
    std::vector<const Request*> admitted;
    const auto taken = [&](const Request& request) {
      return std::find(admitted.begin(), admitted.end(), &request) != admitted.end();
    };
    const auto waiting_left = [&] { return admitted.size() < state_.waiting.size(); };
    while (budget > 0 && has_running_room()) {
      const auto resumed = next_preempted();
      const bool short_only = long_prefills >= options_.max_long_prefills;
      const int index = policy.pick(
          state_.waiting,
          [&](const Request& r) {
            return !taken(r) && (!short_only || !is_long(r)) &&
                   !StepPlanner::waits_for_first_choice(r, cache_enabled);
          },
          is_long, now_, priced_.prefill_ms_per_token());
      const bool waiting_first =
          index >= 0 && (resumed == preempted_.end() ||
                         (policy.policy() == SchedulingPolicy::priority &&
                          policy.runs_before(*state_.waiting[static_cast<size_t>(index)],
                                             *resumed->request, now_)));
      if (index < 0 && resumed == preempted_.end() && waiting_left()) {
        bool long_ones_wait = false;
        for (size_t i = 0; i < state_.waiting.size() && short_only && !long_ones_wait; ++i) {
          long_ones_wait = !taken(*state_.waiting[i]) && is_long(*state_.waiting[i]);
        }
        return blocked(long_ones_wait ? AdmissionBlock::long_prefill_turn
                                      : AdmissionBlock::first_choice_prefill);
      }
      if (waiting_first) {
        const Request& request = *state_.waiting[static_cast<size_t>(index)];
        const TokenList& prompt = request.prompt_tokens;
        const PrefixLookup hit = find_(ledger(), prompt, request.shares_prompt_of != nullptr);
        if (!make_room(static_cast<int>(prompt.size()) - hit.shared_cells(), hit.source,
                       committed)) {
          return blocked(AdmissionBlock::kv_cache_full, &request);
        }
        admitted.push_back(&request);
        if (is_long(request)) ++long_prefills;
        queued_prompt_tokens_ -= queued_prefill_tokens(request);
        Seat seat;
        seat.order = out_.next_admission_order++;
        seat.request = &request;
        seat.prefill_target = static_cast<int>(prompt.size());
        started(start(std::move(seat), hit, index));
      } else {
        if (resumed == preempted_.end()) return;
        const PrefixLookup hit = find_(ledger(), prefill_tokens(*resumed), false);
        if (!make_room(resumed->prompt_remaining - hit.shared_cells(), hit.source, committed)) {
          return blocked(AdmissionBlock::kv_cache_full, resumed->request);
        }
        Seat seat = std::move(*resumed);
        preempted_.erase(resumed);
        started(start(std::move(seat), hit, -1));
      }
      committed = committed_kv_tokens();
    }
    blocked(budget <= 0 ? AdmissionBlock::step_budget : AdmissionBlock::no_free_sequence);
  }

  // The preempted sequence to resume next: the earliest admitted, or under --policy priority
  // the best ranked.
  std::vector<Seat>::iterator next_preempted() {
    const QueuePolicy& policy = planner_.policy_;
    if (policy.policy() != SchedulingPolicy::priority) return preempted_.begin();
    return std::min_element(preempted_.begin(), preempted_.end(),
                            [&](const Seat& a, const Seat& b) {
                              return policy.runs_before(*a.request, *b.request, now_);
                            });
  }

  // The step's plan, with cached prefixes giving way to a running prompt's chunk.
  void plan() {
    PlannedStep planned = plan_at_current_cells();
    while (planned.prompts_want_cells && evict_oldest(-1)) planned = plan_at_current_cells();
    out_.plan = std::move(planned.plan);
    out_.long_stepped_aside = planned.long_stepped_aside;
  }

  // Every cost the plan reads is priced at the KV cells its rows attend over as the ledger
  // stands: admission, an eviction or a preemption just changed them.
  PlannedStep plan_at_current_cells() {
    priced_ = costs_.at_attended_cells(ledger().attended_cells());
    return plan_step();
  }

  // Decodes first: every running stream gets its next token in this step; then prompt chunks
  // of the running requests (the newly admitted among them), short ones oldest first, then
  // long ones with what is left.
  PlannedStep plan_step() const {
    PlannedStep out;
    StepPlan& plan = out.plan;
    int kv_free = kv_free_cells(plan);
    for (const Seat& seat : running_) {
      if (!seat.prefill_done()) continue;
      plan.add_decode(seat.order, seat.live);
      --kv_free;
    }
    const int decode_tokens = plan.decode_tokens();
    // --target-itl-ms holds while a long prompt is being prefilled (what stalls streams for
    // seconds) or while the prompts waiting fit in one step. When more short prompts wait than
    // a step can carry (a burst), they keep the whole token budget: spread over many small
    // steps they left the batch half empty, and a 16-stream burst lost throughput
    // (BENCHMARKS.md).
    bool long_prefill_running = false;
    int prompt_backlog = 0;
    for (const Seat& seat : running_) {
      long_prefill_running = long_prefill_running || is_long_prefill(seat);
      prompt_backlog += seat.prompt_remaining;
    }
    prompt_backlog += queued_prompt_tokens_;
    const int token_budget = options_.max_batched_tokens - decode_tokens;
    int budget = long_prefill_running || prompt_backlog <= token_budget
                     ? priced_.prefill_budget(decode_tokens)
                     : token_budget;
    const int step_budget = budget;
    for (const Seat& seat : running_) {
      if (budget <= 0) break;
      if (seat.prefill_done() || is_long_prefill(seat)) continue;
      add_prefill(out, seat, budget, kv_free);
    }
    out.budget_for_newcomers = budget;
    const int short_tokens = step_budget - budget;
    // A step that carries short prompts carries no long chunk, so their first tokens cost
    // their own prefill only (with a chunk filling the step beside them, short newcomers
    // waited ~80% of a 320-token prefill: brisk doctor's head_of_line_blocking). The long
    // prompt steps aside for one step, never two in a row, and then gets at least a quarter of
    // a step's chunk: a steady stream of short prompts that fills every step cannot starve it.
    // While nothing decodes, a long chunk is cut to the target too
    // (StepCosts::long_chunk_budget): short requests that arrive during its step wait for all
    // of it.
    const bool long_steps_aside = short_tokens > 0 && !state_.long_prefill_stepped_aside;
    const int timed_tokens = priced_.long_chunk_budget(decode_tokens);
    int long_budget =
        long_steps_aside ? 0
                         : std::min(budget, std::max(timed_tokens - short_tokens, timed_tokens / 4));
    out.long_stepped_aside = long_steps_aside && long_prefill_running;
    int long_prefills = 0;
    for (const Seat& seat : running_) {
      if (long_budget <= 0 || long_prefills >= options_.max_long_prefills) break;
      if (seat.prefill_done() || !is_long_prefill(seat)) continue;
      add_prefill(out, seat, long_budget, kv_free);
      ++long_prefills;
    }
    return out;
  }

  // The sequence's next chunk: as much of its prompt as the budget and the free cells allow.
  void add_prefill(PlannedStep& out, const Seat& seat, int& budget, int& kv_free) const {
    const int wanted = std::min(budget, seat.prompt_remaining);
    const int chunk = std::min(wanted, kv_free);
    if (kv_.shared && chunk < wanted) out.prompts_want_cells = true;
    if (chunk <= 0) return;
    out.plan.add_prefill(seat.order, seat.live, chunk);
    budget -= chunk;
    kv_free -= chunk;
  }

  const StepPlanner& planner_;
  const SchedulerOptions& options_;
  const KvShape& kv_;
  const SchedulerState& state_;
  const KvLedger& base_ledger_;
  const PrefixFinder& find_;
  const StepCosts& costs_;
  const TimePoint now_;
  StepDecision& out_;
  StepCosts priced_{0, 0};  // costs_ at the cells the ledger attends now
  std::vector<Seat> running_;    // in admission order
  std::vector<Seat> preempted_;  // in admission order
  int queued_prompt_tokens_;
  bool pass_started_ = false;
};

StepDecision StepPlanner::decide(const SchedulerState& state, const KvLedger& ledger,
                                 const PrefixFinder& find, const StepCosts& costs, TimePoint now,
                                 Start start) const {
  StepDecision decision;
  Planning planning(*this, state, ledger, find, costs, now, decision);
  if (start == Start::step) {
    planning.step();
  } else {
    planning.after_no_room();
  }
  return decision;
}

}  // namespace brisk
