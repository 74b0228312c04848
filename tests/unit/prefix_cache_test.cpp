// The prefix cache: the radix tree of KV cells (PrefixTree) and, on the fake model, the
// scheduler reusing finished requests' cells (KvManager): same streams as without it, fewer
// tokens computed, miss reasons, eviction under pressure and sliding windows.

#include <gtest/gtest.h>

#include <numeric>

#include "fake_model_runner.h"
#include "sched/host_prefix_cache.h"
#include "sched/prefix_tree.h"
#include "scheduler_run.h"

namespace brisk {
namespace {

using namespace testing;  // NOLINT: the harness of scheduler_run.h

TokenList range(Token first, int count) {
  TokenList out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

TokenList concat(TokenList a, const TokenList& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixTree, MatchesTheLongestHeldPrefixAndSharesItsCells) {
  PrefixTree tree;
  tree.append(0, range(1, 10));
  EXPECT_EQ(tree.cells(), 10);
  PrefixTree::Match match = tree.match(concat(range(1, 6), range(100, 4)));
  EXPECT_EQ(match.tokens, 6);
  EXPECT_TRUE(match.owners.test(0));

  tree.share(1, 0, 6);  // splits sequence 0's run after 6 cells
  tree.append(1, range(100, 4));
  EXPECT_EQ(tree.cells(), 14) << "the 6 shared cells count once";
  EXPECT_EQ(tree.length(1), 10);
  EXPECT_EQ(tree.tokens(1), concat(range(1, 6), range(100, 4)));
  EXPECT_EQ(tree.tokens(0), range(1, 10));
  EXPECT_EQ(tree.exclusive_cells(0), 4);
  EXPECT_EQ(tree.exclusive_cells(1), 4);

  PrefixTree::Owners only_1;
  only_1.set(1);
  EXPECT_EQ(tree.cells_outside(only_1), 4) << "sequence 0's own tail";

  tree.release(0);
  EXPECT_EQ(tree.cells(), 10) << "the shared cells stay with sequence 1";
  EXPECT_EQ(tree.match(range(1, 10)).tokens, 6);
  tree.release(1);
  EXPECT_EQ(tree.cells(), 0);
  EXPECT_EQ(tree.nodes(), 0);
}

TEST(PrefixTree, SequencesThatComputedTheSameTokensHoldDifferentCells) {
  PrefixTree tree;
  tree.append(0, range(1, 8));
  tree.append(1, range(1, 5));
  EXPECT_EQ(tree.cells(), 13);
  const PrefixTree::Match match = tree.match(range(1, 8));
  EXPECT_EQ(match.tokens, 8) << "the longer of the two";
  EXPECT_TRUE(match.owners.test(0));
  EXPECT_FALSE(match.owners.test(1));
}

TEST(PrefixTree, AGrowingSequenceExtendsItsOwnRun) {
  PrefixTree tree;
  tree.append(3, range(1, 4));
  for (Token t = 5; t < 50; ++t) tree.append(3, TokenList{t});
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(tree.tokens(3), range(1, 49));
}

// A system prompt shared by every request, then a user turn of its own.
std::function<Job(size_t, const std::vector<Outcome>&)> shared_system_prompt(
    int system_tokens, SamplingParams sampling) {
  return [=](size_t i, const std::vector<Outcome>&) {
    Job job;
    job.prompt = concat(range(1, system_tokens), range(1000 + 50 * static_cast<Token>(i), 10));
    job.max_tokens = 12;
    job.sampling = sampling;
    return job;
  };
}

std::vector<Job> materialize(int count,
                             const std::function<Job(size_t, const std::vector<Outcome>&)>& make) {
  std::vector<Job> out;
  for (int i = 0; i < count; ++i) out.push_back(make(static_cast<size_t>(i), {}));
  return out;
}

TEST(PrefixCache, ASharedSystemPromptIsComputedOnceAndStreamsAreUnchanged) {
  for (const SamplingParams& sampling : {greedy(), seeded(3)}) {
    const auto make = shared_system_prompt(100, sampling);
    FakeModelRunner runner(4096);
    SchedulerRun run(runner, options(4));
    const auto outcomes = run.one_by_one(5, make);
    expect_same_streams(outcomes, alone(materialize(5, make)));
    EXPECT_EQ(runner.misplaced_tokens(), 0);
    EXPECT_EQ(runner.bad_prefix_copies(), 0);
    EXPECT_EQ(outcomes[0].cached_prompt_tokens, 0);
    for (size_t i = 1; i < outcomes.size(); ++i) {
      EXPECT_EQ(outcomes[i].cached_prompt_tokens, 100) << "request " << i;
    }
    EXPECT_EQ(run.metric("brisk_prefix_cache_queries_total"), 5);
    EXPECT_EQ(run.metric("brisk_prefix_cache_hits_total"), 4);
    EXPECT_EQ(run.metric("brisk_prefix_cache_hit_tokens_total"), 400);
    EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"no_match\"}"), 1);
  }
}

TEST(PrefixCache, TheNextTurnOfAChatReusesThePreviousTurnAndItsAnswer) {
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, options(2));
  const TokenList first_turn = range(1, 40);
  auto turn = [&](size_t i, const std::vector<Outcome>& before) {
    Job job;
    job.max_tokens = 8;
    job.sampling = greedy();
    job.prompt = first_turn;
    for (size_t t = 0; t < i; ++t) {
      // The fake's pieces are "<id> ": the previous answer's tokens, then a new user turn.
      std::istringstream answer(before[t].text);
      for (Token token; answer >> token;) job.prompt.push_back(token);
      job.prompt = concat(job.prompt, range(500 + 20 * static_cast<Token>(t), 5));
    }
    return job;
  };
  const auto outcomes = run.one_by_one(3, turn);
  EXPECT_EQ(outcomes[1].cached_prompt_tokens, 40 + 8 - 1)
      << "the first turn and its answer but the last token, whose cell was never computed";
  EXPECT_EQ(outcomes[2].cached_prompt_tokens, 40 + 8 + 5 + 8 - 1);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_sequences"), 1)
      << "each turn's cached sequence is replaced by the next, which holds all of it";
}

TEST(PrefixCache, OffComputesEverythingAndSaysWhy) {
  const auto make = shared_system_prompt(100, greedy());
  FakeModelRunner runner(4096);
  SchedulerOptions off = options(4);
  off.prefix_cache.enabled = false;
  SchedulerRun run(runner, off);
  const auto outcomes = run.one_by_one(3, make);
  expect_same_streams(outcomes, alone(materialize(3, make)));
  EXPECT_EQ(runner.prefix_copies(), 0);
  EXPECT_EQ(runner.cells_in_use(), 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"disabled\"}"), 3);
}

TEST(PrefixCache, AShortMatchIsNotReused) {
  const auto make = shared_system_prompt(20, greedy());  // below the minimum of 32
  FakeModelRunner runner(4096);
  SchedulerRun run(runner, options(4));
  run.one_by_one(2, make);
  EXPECT_EQ(runner.prefix_copies(), 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"below_minimum\"}"), 1);
}

// Cached prefixes give their cells to running requests, least recently used first, and a prompt
// whose prefix was evicted is told apart from one never seen.
TEST(PrefixCache, PressureEvictsTheOldestAndTheMissSaysEvicted) {
  FakeModelRunner runner(400);
  SchedulerRun run(runner, options(2));
  auto prompt_of = [](size_t family) { return range(1 + 1000 * static_cast<Token>(family), 150); };
  const std::vector<size_t> families = {0, 1, 2, 0};  // 0 comes back after two others
  const auto outcomes = run.one_by_one(4, [&](size_t i, const std::vector<Outcome>&) {
    Job job;
    job.prompt = prompt_of(families[i]);
    job.max_tokens = 20;
    job.sampling = greedy();
    return job;
  });
  for (const auto& outcome : outcomes) EXPECT_EQ(outcome.reason, FinishReason::length);
  EXPECT_GT(run.metric("brisk_prefix_cache_evictions_total"), 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"evicted\"}"), 1);
  EXPECT_EQ(outcomes[3].cached_prompt_tokens, 0);
  EXPECT_LE(runner.max_cells_used(), 400);
}

TEST(PrefixCache, APrefixWhoseWindowCellsAreGoneIsAWindowMiss) {
  FakeModelRunner runner(4096);
  runner.sliding_window = 16;
  runner.drop_window_cells = true;  // the source keeps only its last 16 window cells
  SchedulerRun run(runner, options(2));
  const TokenList base = range(1, 100);
  const auto outcomes = run.one_by_one(3, [&](size_t i, const std::vector<Outcome>& before) {
    Job job;
    job.max_tokens = 4;
    job.sampling = greedy();
    if (i == 0) job.prompt = base;
    // Reuses 60 of the 103 cells the first left: their window is gone.
    if (i == 1) job.prompt = concat(range(1, 60), range(700, 10));
    if (i == 2) {  // everything the first left: the window before position 103 is there
      job.prompt = base;
      std::istringstream answer(before[0].text);
      for (Token token; answer >> token;) job.prompt.push_back(token);
      job.prompt = concat(job.prompt, range(900, 3));
    }
    return job;
  });
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"window_expired\"}"), 1);
  EXPECT_EQ(outcomes[1].cached_prompt_tokens, 0);
  EXPECT_EQ(outcomes[2].cached_prompt_tokens, 103);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

// Requests that run together share what one of them has computed, and a preempted request
// resumes on cached cells: every stream is still exactly what it is alone.
TEST(PrefixCache, PreemptionAndSharingTogetherKeepStreamsExact) {
  for (const SamplingParams& sampling : {greedy(), seeded(11)}) {
    std::vector<Job> work;
    for (int i = 0; i < 8; ++i) {
      Job job;
      job.prompt = concat(range(1, 60), range(2000 + 30 * i, 5 + i));
      job.max_tokens = 40;
      job.sampling = sampling;
      work.push_back(job);
    }
    FakeModelRunner runner(300);
    SchedulerRun run(runner, options(4, 32));
    const auto together = run.all(work);
    expect_same_streams(together, alone(work));
    EXPECT_EQ(runner.misplaced_tokens(), 0);
    EXPECT_EQ(runner.bad_prefix_copies(), 0);
    EXPECT_GT(run.metric("brisk_prefix_cache_hits_total"), 0);
    EXPECT_LE(runner.max_cells_used(), 300);
  }
}

// Prompts that never repeat would fill the buffer with cells every step's attention spans:
// cached sequences nobody reused are kept on trial, a few at most; one reused stays.
TEST(PrefixCache, PrefixesNobodyReusesAreFewAndAReusedOneStays) {
  FakeModelRunner runner(100000);
  SchedulerRun run(runner, options(4));
  const TokenList system = range(1, 80);
  const auto outcomes = run.one_by_one(8, [&](size_t i, const std::vector<Outcome>&) {
    Job job;
    job.max_tokens = 6;
    job.sampling = greedy();
    // 0 and 7 share a system prompt; 1..6 are unique.
    job.prompt = (i == 0 || i == 7) ? concat(system, range(5000 + 10 * static_cast<Token>(i), 4))
                                    : range(1000 * static_cast<Token>(i) + 1, 80);
    return job;
  });
  EXPECT_EQ(run.metric("brisk_prefix_cache_sequences"), 2) << "the default trial allowance";
  EXPECT_EQ(outcomes[7].cached_prompt_tokens, 0) << "0 was freed after two unique ones";
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"evicted\"}"), 1);

  FakeModelRunner reuse_runner(100000);
  SchedulerRun reuse(reuse_runner, options(4));
  const auto reused = reuse.one_by_one(9, [&](size_t i, const std::vector<Outcome>&) {
    Job job;
    job.max_tokens = 6;
    job.sampling = greedy();
    // 0, 1 and 8 share the system prompt: 1 reuses 0's cells, so 0 is kept past the trials.
    job.prompt = (i <= 1 || i == 8) ? concat(system, range(5000 + 10 * static_cast<Token>(i), 4))
                                    : range(1000 * static_cast<Token>(i) + 1, 80);
    return job;
  });
  EXPECT_EQ(reused[1].cached_prompt_tokens, 80);
  EXPECT_EQ(reused[8].cached_prompt_tokens, 80) << "the reused prefix outlived the trials";
}

// --- the host tier (--cache-ram) --------------------------------------------------------------

std::vector<uint8_t> bytes(size_t count) { return std::vector<uint8_t>(count, 7); }

TEST(HostPrefixCache, KeepsTheLongestStateOfAPrefixAndEvictsTheLeastRecentlyUsedByBytes) {
  HostPrefixCache host(1000);
  const auto any = [](const HostPrefixCache::Entry&, int) { return true; };
  EXPECT_TRUE(host.insert(range(1, 10), bytes(300), 0).empty());
  // One that extends it replaces it; one it extends is redundant.
  host.insert(range(1, 20), bytes(400), 0);
  EXPECT_EQ(host.entries(), 1u);
  EXPECT_EQ(host.bytes(), 400u);
  bool stored = true;
  host.insert(range(1, 5), bytes(100), 0, &stored);
  EXPECT_FALSE(stored);
  EXPECT_EQ(host.match(range(1, 30), any).tokens, 20);
  EXPECT_EQ(host.match(concat(range(1, 7), range(500, 3)), any).tokens, 7);

  host.insert(range(100, 10), bytes(400), 0);           // 800 bytes held
  host.touch(host.match(range(1, 20), any).entry->id);  // the first is now the most recent
  const auto evicted = host.insert(range(200, 10), bytes(300), 0);  // 1100 > 1000
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], range(100, 10)) << "the least recently used went";
  EXPECT_EQ(host.bytes(), 700u);
  EXPECT_LE(host.bytes(), host.capacity_bytes());

  host.insert(range(300, 10), bytes(1001), 0, &stored);
  EXPECT_FALSE(stored) << "a state over the whole budget is not kept";
  EXPECT_EQ(host.match(range(300, 10), any).tokens, 0);
  // `usable` filters matches (a sliding window that no longer covers them).
  EXPECT_EQ(
      host.match(range(1, 20), [](const HostPrefixCache::Entry&, int n) { return n < 5; }).tokens,
      0);
}

SchedulerOptions with_host_tier(int max_seqs, size_t host_bytes) {
  SchedulerOptions out = options(max_seqs);
  out.prefix_cache.host_bytes = host_bytes;
  return out;
}

// The prefix the trials freed in PrefixesNobodyReusesAreFewAndAReusedOneStays comes back from
// host memory: restored, not computed, and every stream is what it is alone.
TEST(PrefixCache, AnEvictedPrefixIsRestoredFromTheHostTierAndStreamsAreUnchanged) {
  for (const SamplingParams& sampling : {greedy(), seeded(5)}) {
    const TokenList system = range(1, 80);
    const auto make = [&](size_t i, const std::vector<Outcome>&) {
      Job job;
      job.max_tokens = 6;
      job.sampling = sampling;
      job.prompt = (i == 0 || i == 7) ? concat(system, range(5000 + 10 * static_cast<Token>(i), 4))
                                      : range(1000 * static_cast<Token>(i) + 1, 80);
      return job;
    };
    FakeModelRunner runner(100000);
    SchedulerRun run(runner, with_host_tier(4, 1 << 20));
    const auto outcomes = run.one_by_one(8, make);
    expect_same_streams(outcomes, alone(materialize(8, make)));
    EXPECT_EQ(outcomes[7].cached_prompt_tokens, 80);
    EXPECT_EQ(runner.restores(), 1);
    EXPECT_EQ(runner.misplaced_tokens(), 0);
    EXPECT_EQ(run.metric("brisk_prefix_cache_host_restores_total"), 1);
    EXPECT_EQ(run.metric("brisk_prefix_cache_host_hit_tokens_total"), 80);
    EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"evicted\"}"), 0);
    EXPECT_GT(run.metric("brisk_prefix_cache_host_saves_total"), 0);
    EXPECT_GT(run.metric("brisk_prefix_cache_host_bytes"), 0);
  }
}

// A chat's next turn after many other requests: its history is in host memory, not recomputed.
TEST(PrefixCache, AChatTurnAfterManyOthersFindsItsHistoryInTheHostTier) {
  FakeModelRunner runner(100000);
  SchedulerRun run(runner, with_host_tier(2, 1 << 20));
  const TokenList first_turn = range(1, 40);
  std::string first_answer;
  const auto outcomes = run.one_by_one(8, [&](size_t i, const std::vector<Outcome>& before) {
    Job job;
    job.max_tokens = 8;
    job.sampling = greedy();
    if (i < 7) {  // the first turn, then six other conversations' first turns
      job.prompt = i == 0 ? first_turn : range(3000 + 100 * static_cast<Token>(i), 40);
      return job;
    }
    job.prompt = first_turn;
    std::istringstream answer(before[0].text);
    for (Token token; answer >> token;) job.prompt.push_back(token);
    job.prompt = concat(job.prompt, range(500, 5));
    return job;
  });
  EXPECT_EQ(outcomes[7].cached_prompt_tokens, 40 + 8 - 1);
  EXPECT_EQ(runner.restores(), 1);

  // Without the host tier the same turn is recomputed.
  FakeModelRunner cold_runner(100000);
  SchedulerRun cold(cold_runner, with_host_tier(2, 0));
  std::vector<Job> same;
  for (size_t i = 0; i < 7; ++i) {
    Job job;
    job.max_tokens = 8;
    job.sampling = greedy();
    job.prompt = i == 0 ? first_turn : range(3000 + 100 * static_cast<Token>(i), 40);
    same.push_back(job);
  }
  const auto cold_outcomes = cold.one_by_one(8, [&](size_t i, const std::vector<Outcome>& before) {
    if (i < 7) return same[i];
    Job job = same[0];
    std::istringstream answer(before[0].text);
    for (Token token; answer >> token;) job.prompt.push_back(token);
    job.prompt = concat(job.prompt, range(500, 5));
    return job;
  });
  EXPECT_EQ(cold_outcomes[7].cached_prompt_tokens, 0);
  EXPECT_EQ(cold_outcomes[7].text, outcomes[7].text) << "restored or computed, the same answer";
  EXPECT_EQ(cold_runner.restores(), 0);
}

// A host tier too small for everything evicts by bytes, never grows past its bound, and a prefix
// it let go of is a `host_evicted` miss.
TEST(PrefixCache, AFullHostTierEvictsAndTheMissSaysHostEvicted) {
  FakeModelRunner runner(100000);
  // The fake saves 4 bytes per token: room for two 86-token sequences, not three.
  SchedulerRun run(runner, with_host_tier(2, 2 * 86 * sizeof(Token) + 10));
  const auto outcomes = run.one_by_one(9, [&](size_t i, const std::vector<Outcome>&) {
    Job job;
    job.max_tokens = 6;
    job.sampling = greedy();
    // 0..7 unique; 8 repeats 0, long gone from both tiers.
    job.prompt = range(1000 * static_cast<Token>(i % 8) + 1, 80);
    return job;
  });
  EXPECT_EQ(outcomes[8].cached_prompt_tokens, 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"host_evicted\"}"), 1);
  EXPECT_GT(run.metric("brisk_prefix_cache_host_evictions_total"), 0);
  EXPECT_LE(run.metric("brisk_prefix_cache_host_bytes"),
            run.metric("brisk_prefix_cache_host_capacity_bytes"));
  EXPECT_EQ(runner.restores(), 0);
}

// With a buffer per sequence (--no-kv-unified) the idle sequences are the cache: a chat's next
// turn takes its previous turn's sequence over, cells in place, nothing copied; and no trial
// limit applies (an idle buffer costs no running stream anything), so every conversation's
// history stays while there are ids for it.
TEST(PerSequenceLayout, EveryChatsNextTurnTakesOverItsPreviousSequence) {
  const int conversations = 4;
  auto turn = [&](size_t i, const std::vector<Outcome>& before) {
    Job job;
    job.max_tokens = 8;
    job.sampling = greedy();
    const size_t conversation = i % conversations;
    job.prompt = range(1 + 100 * static_cast<Token>(conversation), 40);
    if (i >= conversations) {
      std::istringstream answer(before[conversation].text);
      for (Token token; answer >> token;) job.prompt.push_back(token);
      job.prompt = concat(job.prompt, range(900 + 10 * static_cast<Token>(conversation), 5));
    }
    return job;
  };
  FakeModelRunner runner(4096, -1, 97, conversations);
  runner.per_sequence = true;
  SchedulerRun run(runner, options(conversations));
  const auto outcomes = run.one_by_one(2 * conversations, turn);

  FakeModelRunner cold_runner(4096, -1, 97, conversations);
  cold_runner.per_sequence = true;
  SchedulerOptions off = options(conversations);
  off.prefix_cache.enabled = false;
  SchedulerRun cold(cold_runner, off);
  const auto computed = cold.one_by_one(2 * conversations, turn);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].text, computed[i].text) << "turn " << i;
    EXPECT_EQ(outcomes[i].cached_prompt_tokens, i < conversations ? 0 : 40 + 8 - 1) << i;
  }
  EXPECT_EQ(runner.prefix_copies(), 0) << "taken over in place";
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  EXPECT_EQ(run.metric("brisk_prefix_cache_hits_total"), conversations);
}

// A prompt sharing only the start of an idle sequence takes it over too: the rest is freed,
// first saved to the host tier, from which that sequence's own next turn is restored.
TEST(PerSequenceLayout, ATakenOverSequencesTailGoesToTheHostTier) {
  const TokenList system = range(1, 60);
  auto make = [&](size_t i, const std::vector<Outcome>& before) {
    Job job;
    job.max_tokens = 6;
    job.sampling = greedy();
    job.prompt = concat(system, range(i == 1 ? 700 : 500, 8));  // 0 and 2: one chat; 1: another
    if (i == 2) {
      std::istringstream answer(before[0].text);
      for (Token token; answer >> token;) job.prompt.push_back(token);
      job.prompt = concat(job.prompt, range(800, 4));
    }
    return job;
  };
  FakeModelRunner runner(4096, -1, 97, 1);
  runner.per_sequence = true;
  SchedulerRun run(runner, with_host_tier(1, 1 << 20));
  const auto outcomes = run.one_by_one(3, make);
  EXPECT_EQ(outcomes[1].cached_prompt_tokens, 60) << "the system prompt, in place";
  EXPECT_EQ(runner.trims(), 1);
  EXPECT_EQ(outcomes[2].cached_prompt_tokens, 60 + 8 + 6 - 1) << "the first chat, from host";
  EXPECT_EQ(runner.restores(), 1);
  EXPECT_EQ(runner.prefix_copies(), 0);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
  const std::vector<Job> jobs = {make(0, {}), make(1, {}), make(2, outcomes)};
  expect_same_streams(outcomes, alone(jobs));
}

// llama.cpp computes a batch of a buffer per sequence one run of consecutive, increasing ids at
// a time: when a wave fills every id, some cached and taken in another order than they were
// admitted, every step is listed by id: one run, one pass.
TEST(PerSequenceLayout, AFullWaveIsOneRunOfSequenceIdsEveryStep) {
  auto job = [](int i) {
    Job made;
    made.prompt = range(100 * i + 1, 20);
    made.max_tokens = 12;
    made.sampling = greedy();
    return made;
  };
  FakeModelRunner runner(4096, -1, 97, 8);
  runner.per_sequence = true;
  SchedulerRun run(runner, options(8, 512));
  std::vector<Job> jobs;
  for (int i = 0; i < 10; ++i) {
    jobs.push_back(job(i));
    // Three first: two done by decode 3 (their ids then cached), one still running when a
    // wave of seven arrives.
    jobs.back().max_tokens = i < 2 ? 2 : i == 2 ? 30 : 12;
    jobs.back().submit_before_decode = i < 3 ? 0 : 6;
  }
  const auto outcomes = run.all(jobs);
  for (Job& made : jobs) made.submit_before_decode = 0;
  expect_same_streams(outcomes, alone(jobs));
  EXPECT_EQ(run.metric("brisk_prefix_cache_misses_total{reason=\"no_match\"}"), 10);
  EXPECT_EQ(runner.max_sequence_runs(), 1);
  EXPECT_EQ(runner.misplaced_tokens(), 0);
}

// A prompt sharing a running sequence's prefix gets a copy of its cells (llama.cpp copies a
// sequence's whole buffer, then the copy is trimmed): both streams as if each ran alone.
TEST(PerSequenceLayout, APrefixOfARunningSequenceIsCopied) {
  for (const SamplingParams& sampling : {greedy(), seeded(7)}) {
    std::vector<Job> work;
    for (int i = 0; i < 2; ++i) {
      Job job;
      job.prompt = concat(range(1, 70), range(3000 + 20 * i, 6));
      job.max_tokens = 30;
      job.sampling = sampling;
      job.submit_before_decode = i == 0 ? 0 : 6;  // after the first one's prompt is in
      work.push_back(job);
    }
    FakeModelRunner runner(4096, -1, 97, 2);
    runner.per_sequence = true;
    SchedulerRun run(runner, options(2, 64));
    const auto outcomes = run.all(work);
    expect_same_streams(outcomes, alone(work));
    EXPECT_EQ(outcomes[1].cached_prompt_tokens, 70);
    EXPECT_EQ(runner.prefix_copies(), 1);
    EXPECT_EQ(runner.bad_prefix_copies(), 0);
    EXPECT_EQ(runner.misplaced_tokens(), 0);
  }
}

}  // namespace
}  // namespace brisk
