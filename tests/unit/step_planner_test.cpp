// The step planner on hand-built states, with no model runner: the decision it returns (the
// preemptions, admissions, KV operations and batch) and that deciding changes nothing.
#include "sched/step_planner.h"

#include <gtest/gtest.h>

#include <numeric>

namespace brisk {
namespace {

TokenList tokens_from(int first, int count) {
  TokenList tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::shared_ptr<Request> request(TokenList prompt, int priority = 0) {
  auto made = std::make_shared<Request>();
  made->prompt_tokens = std::move(prompt);
  made->max_tokens = 8;
  made->priority = priority;
  made->on_update = [](GenerationUpdate&&) {};
  return made;
}

SchedulerOptions options(int max_seqs) {
  SchedulerOptions out;
  out.max_seqs = max_seqs;
  out.max_batched_tokens = 64;
  out.max_step_ms = 0;  // the token budget alone cuts chunks
  out.prefix_cache.min_tokens = 4;
  out.prefix_cache.trial_sequences = 8;
  return out;
}

// A state, its ledger and what the planner needs beside them, built by hand.
struct Bench {
  explicit Bench(SchedulerOptions opts, int capacity_cells)
      : options(opts),
        planner(opts, {capacity_cells, 1, true}),
        ledger(8, opts.max_seqs, /*per_sequence=*/false, opts.prefix_cache) {}

  // A running request whose prompt is in its cells: it decodes next.
  Sequence& decoding(TokenList prompt, int priority = 0) {
    KvOps ops;
    const int id = ledger.acquire({}, ops);
    ledger.record(id, prompt);
    const int tokens = static_cast<int>(prompt.size());
    auto sequence = std::make_unique<Sequence>(request(std::move(prompt), priority), id, now,
                                               state.next_admission_order++);
    sequence->commit_prefill_chunk(tokens);
    state.running.push_back(std::move(sequence));
    return *state.running.back();
  }
  // A finished request's cells, left cached.
  void cached(const TokenList& prompt) {
    KvOps ops;
    const int id = ledger.acquire({}, ops);
    ledger.record(id, prompt);
    ledger.retire(id, ops);
  }
  Request& queued(TokenList prompt, int priority = 0) {
    state.waiting.push_back(request(std::move(prompt), priority));
    state.queued_prompt_tokens += static_cast<int>(state.waiting.back()->prompt_tokens.size());
    return *state.waiting.back();
  }
  StepDecision decide(StepPlanner::Start start = StepPlanner::Start::step) const {
    const PrefixFinder find = [](const KvLedger& in, std::span<const Token> tokens, bool shared) {
      return lookup_in_ledger(in, tokens, shared ? 1 : in.options().min_tokens);
    };
    return planner.decide(state, ledger, find, costs, now, start);
  }

  SchedulerOptions options;
  StepPlanner planner;
  KvLedger ledger;
  SchedulerState state;
  StepCosts costs{0, 64};
  TimePoint now{};
};

// What a plan carries: (admission order, tokens, decode) per entry.
std::vector<std::tuple<uint64_t, int, bool>> entries(const StepPlan& plan) {
  std::vector<std::tuple<uint64_t, int, bool>> out;
  for (const StepPlan::Entry& entry : plan.entries()) {
    out.emplace_back(entry.order, entry.tokens, entry.decode);
  }
  return out;
}

TEST(StepPlanner, DecidesAdmissionsAndTheBatchWithoutChangingTheState) {
  Bench bench(options(4), 200);
  bench.decoding(tokens_from(1, 10));
  bench.queued(tokens_from(100, 20));
  bench.queued(tokens_from(200, 20));

  const StepDecision decision = bench.decide();
  ASSERT_EQ(decision.admissions.size(), 2u);
  EXPECT_EQ(decision.admissions[0].waiting_index, 0);
  EXPECT_EQ(decision.admissions[1].waiting_index, 1);
  EXPECT_EQ(decision.admissions[0].order, 1u);
  EXPECT_EQ(decision.next_admission_order, 3u);
  EXPECT_TRUE(decision.preemptions.empty());
  EXPECT_TRUE(decision.kv_ops.empty()) << "free ids, no cached prefix: nothing for the cache to do";
  ASSERT_TRUE(decision.ledger.has_value());
  EXPECT_EQ(decision.ledger->running_sequences(), 3);
  using E = std::tuple<uint64_t, int, bool>;
  EXPECT_EQ(entries(decision.plan), (std::vector<E>{{0, 1, true}, {1, 20, false}, {2, 20, false}}));
  ASSERT_TRUE(decision.pass.has_value());

  // Nothing moved: the same state gives the same decision.
  EXPECT_EQ(bench.state.waiting.size(), 2u);
  EXPECT_EQ(bench.state.running.size(), 1u);
  EXPECT_EQ(bench.state.next_admission_order, 1u);
  EXPECT_EQ(bench.ledger.running_sequences(), 1);
  EXPECT_EQ(bench.ledger.used_cells(), 10);
  const StepDecision again = bench.decide();
  EXPECT_EQ(entries(again.plan), entries(decision.plan));
  EXPECT_EQ(again.admissions.size(), decision.admissions.size());
}

TEST(StepPlanner, ANewcomerReusesACachedPrefixAndComputesTheRest) {
  Bench bench(options(4), 200);
  const TokenList system = tokens_from(100, 30);
  bench.cached(system);
  TokenList prompt = system;
  prompt.push_back(7);
  prompt.push_back(8);
  bench.queued(prompt);

  const StepDecision decision = bench.decide();
  ASSERT_EQ(decision.admissions.size(), 1u);
  const StepDecision::Admission& admitted = decision.admissions[0];
  EXPECT_EQ(admitted.hit.tokens, 30);
  EXPECT_EQ(admitted.reused, 30);
  KvOp copy;
  copy.kind = KvOp::Kind::copy_prefix;
  copy.id = admitted.id;
  copy.source = admitted.hit.source;
  copy.tokens = 30;
  KvOp freed;  // the cached sequence held nothing the newcomer does not share
  freed.kind = KvOp::Kind::release;
  freed.id = admitted.hit.source;
  EXPECT_EQ(decision.kv_ops, (KvOps{copy, freed}));
  using E = std::tuple<uint64_t, int, bool>;
  EXPECT_EQ(entries(decision.plan), (std::vector<E>{{0, 2, false}}));
  EXPECT_EQ(bench.ledger.cached_sequences(), 1) << "the state's ledger changed";
}

TEST(StepPlanner, DecodesOutgrowingTheCellsEvictCachedPrefixesFirst) {
  Bench bench(options(4), 40);
  bench.decoding(tokens_from(1, 15));
  bench.decoding(tokens_from(100, 15));
  bench.cached(tokens_from(200, 10));  // 40 of 40 cells in use

  const StepDecision decision = bench.decide();
  EXPECT_TRUE(decision.preemptions.empty());
  ASSERT_EQ(decision.kv_ops.size(), 1u);
  EXPECT_TRUE(decision.kv_ops[0].eviction);
  using E = std::tuple<uint64_t, int, bool>;
  EXPECT_EQ(entries(decision.plan), (std::vector<E>{{0, 1, true}, {1, 1, true}}));
}

TEST(StepPlanner, WithNothingCachedTheLatestArrivedIsPreemptedAndWaitsForRoom) {
  Bench bench(options(4), 30);
  bench.decoding(tokens_from(1, 15));
  const Sequence& latest = bench.decoding(tokens_from(100, 15));  // 30 of 30 cells

  const StepDecision decision = bench.decide();
  EXPECT_EQ(decision.preemptions, (std::vector<uint64_t>{1}));
  KvOp release;
  release.kind = KvOp::Kind::release;
  release.id = latest.slot();
  EXPECT_EQ(decision.kv_ops, (KvOps{release}));
  EXPECT_TRUE(decision.admissions.empty()) << "its replay does not fit beside the other";
  ASSERT_TRUE(decision.pass.has_value());
  EXPECT_EQ(decision.pass->blocked, AdmissionBlock::kv_cache_full);
  EXPECT_EQ(decision.pass->stopped_at, &latest.request_ref());
  using E = std::tuple<uint64_t, int, bool>;
  EXPECT_EQ(entries(decision.plan), (std::vector<E>{{0, 1, true}}));
  EXPECT_EQ(bench.state.running.size(), 2u);
}

TEST(StepPlanner, AfterNoRoomACachedPrefixGivesWayAndNobodyIsAdmitted) {
  Bench bench(options(4), 200);
  bench.decoding(tokens_from(1, 15));
  bench.cached(tokens_from(200, 10));
  bench.queued(tokens_from(300, 10));

  const StepDecision decision = bench.decide(StepPlanner::Start::after_no_room);
  ASSERT_EQ(decision.kv_ops.size(), 1u);
  EXPECT_TRUE(decision.kv_ops[0].eviction);
  EXPECT_TRUE(decision.admissions.empty());
  EXPECT_TRUE(decision.preemptions.empty());
  EXPECT_FALSE(decision.pass.has_value());
}

TEST(StepPlanner, UnderPriorityAWaitingRequestTakesTheLowestRankedsPlace) {
  SchedulerOptions opts = options(2);
  opts.queue_policy.policy = SchedulingPolicy::priority;
  Bench bench(opts, 200);
  bench.decoding(tokens_from(1, 10), /*priority=*/1);
  bench.decoding(tokens_from(100, 10), /*priority=*/5);
  bench.queued(tokens_from(300, 10), /*priority=*/0);

  const StepDecision decision = bench.decide();
  EXPECT_EQ(decision.preemptions, (std::vector<uint64_t>{1}));
  ASSERT_EQ(decision.admissions.size(), 1u);
  EXPECT_EQ(decision.admissions[0].waiting_index, 0);
  using E = std::tuple<uint64_t, int, bool>;
  EXPECT_EQ(entries(decision.plan), (std::vector<E>{{0, 1, true}, {2, 10, false}}));
  ASSERT_TRUE(decision.pass.has_value());
  EXPECT_EQ(decision.pass->blocked, AdmissionBlock::no_free_sequence);
}

}  // namespace
}  // namespace brisk
