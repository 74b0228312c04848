// The KV ledger on hand-built states, with no model runner: what it holds after each change and
// the KvOps it emits for the cache to match.
#include "sched/kv_ledger.h"

#include <gtest/gtest.h>

#include <numeric>

namespace brisk {
namespace {

TokenList tokens_from(int first, int count) {
  TokenList tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

KvOp op(KvOp::Kind kind, int id, int tokens = 0, int source = -1) {
  KvOp made;
  made.kind = kind;
  made.id = id;
  made.tokens = tokens;
  made.source = source;
  return made;
}

KvOp eviction(int id, TokenList held) {
  KvOp made = op(KvOp::Kind::release, id);
  made.eviction = true;
  made.tokens_held = std::move(held);
  return made;
}

KvOp save(int id, TokenList held) {
  KvOp made = op(KvOp::Kind::save_to_host, id);
  made.tokens_held = std::move(held);
  return made;
}

PrefixLookup hit_of(const KvLedger& ledger, const TokenList& prompt) {
  return lookup_in_ledger(ledger, prompt, ledger.options().min_tokens);
}

// One buffer, 8 ids, 4 running at most: ids beyond the running ones hold cached prefixes.
KvLedger one_buffer(PrefixCacheOptions options = {}) {
  options.min_tokens = 4;
  return KvLedger(8, 4, /*per_sequence=*/false, options);
}

// A sequence that computed `prompt` and finished, its cells left cached; returns its id.
int finished_with(KvLedger& ledger, const TokenList& prompt, KvOps& ops) {
  const int id = ledger.acquire({}, ops);
  ledger.record(id, prompt);
  ledger.retire(id, ops);
  return id;
}

TEST(KvLedger, APromptThatStartsTheSameWayCopiesTheCachedCellsInOneBuffer) {
  KvLedger ledger = one_buffer();
  KvOps ops;
  const TokenList system = tokens_from(100, 20);
  TokenList first = system;
  first.push_back(1);
  const int cached = finished_with(ledger, first, ops);
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(ledger.cached_sequences(), 1);
  EXPECT_EQ(ledger.used_cells(), 21);

  TokenList second = system;
  second.push_back(2);
  second.push_back(3);
  const PrefixLookup hit = hit_of(ledger, second);
  ASSERT_EQ(hit.tokens, 20);
  ASSERT_EQ(hit.source, cached);
  const int id = ledger.acquire(hit, ops);
  EXPECT_NE(id, cached);
  EXPECT_EQ(ledger.attach(id, hit, second, ops), 20);
  EXPECT_EQ(ops, (KvOps{op(KvOp::Kind::copy_prefix, id, 20, cached)}));
  // Shared, not copied: the cells in use did not grow.
  EXPECT_EQ(ledger.used_cells(), 21);
  EXPECT_EQ(ledger.cached_cells(), 1);  // the first prompt's last token, which nobody shares
}

TEST(KvLedger, ACachedSequenceWhoseEveryCellIsSharedIsFreed) {
  KvLedger ledger = one_buffer();
  KvOps ops;
  const TokenList prompt = tokens_from(100, 20);
  const int cached = finished_with(ledger, prompt, ops);
  TokenList longer = prompt;
  longer.push_back(7);
  const PrefixLookup hit = hit_of(ledger, longer);
  ASSERT_EQ(hit.tokens, 20);
  const int id = ledger.acquire(hit, ops);
  ledger.attach(id, hit, longer, ops);
  // Freed, not evicted for room: not counted as an eviction, and no state saved.
  EXPECT_EQ(ops, (KvOps{op(KvOp::Kind::copy_prefix, id, 20, cached), op(KvOp::Kind::release, cached)}));
  EXPECT_EQ(ledger.cached_sequences(), 0);
  EXPECT_EQ(ledger.used_cells(), 20);
}

TEST(KvLedger, EvictsTheLeastRecentlyUsedAndSavesItWhenThereIsAHostTier) {
  PrefixCacheOptions options;
  options.host_bytes = 1 << 20;
  options.trial_sequences = 8;
  KvLedger ledger = one_buffer(options);
  KvOps ops;
  const TokenList a = tokens_from(100, 10);
  const TokenList b = tokens_from(200, 10);
  const int id_a = finished_with(ledger, a, ops);
  const int id_b = finished_with(ledger, b, ops);
  EXPECT_EQ(ledger.evictable_cells(-1), 20);
  EXPECT_EQ(ledger.evictable_cells(id_a), 10);
  ASSERT_TRUE(ledger.evict_oldest(id_a, ops));  // a is kept: b goes
  EXPECT_EQ(ops, (KvOps{save(id_b, b), eviction(id_b, b)}));
  ops.clear();
  ASSERT_TRUE(ledger.evict_oldest(-1, ops));
  EXPECT_EQ(ops, (KvOps{save(id_a, a), eviction(id_a, a)}));
  ops.clear();
  EXPECT_FALSE(ledger.evict_oldest(-1, ops));
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(ledger.used_cells(), 0);
}

TEST(KvLedger, AnEvictionSaysWhatItFreedForTheMissItCauses) {
  KvLedger ledger = one_buffer();
  KvOps ops;
  const TokenList prompt = tokens_from(100, 130);
  finished_with(ledger, prompt, ops);
  ASSERT_TRUE(ledger.evict_oldest(-1, ops));
  EXPECT_EQ(ops, (KvOps{eviction(0, prompt)}));  // no host tier: nothing saved
  TokenList again = prompt;
  again.push_back(1);
  EXPECT_EQ(lookup_in_ledger(ledger, again, 4).miss, PrefixMiss::no_match);
}

TEST(KvLedger, UnreusedCachedSequencesBeyondTheTrialsAreEvictedOldestFirst) {
  PrefixCacheOptions options;
  options.trial_sequences = 2;
  KvLedger ledger = one_buffer(options);
  KvOps ops;
  const int oldest = finished_with(ledger, tokens_from(100, 10), ops);
  finished_with(ledger, tokens_from(200, 10), ops);
  EXPECT_TRUE(ops.empty());
  finished_with(ledger, tokens_from(300, 10), ops);
  EXPECT_EQ(ops, (KvOps{eviction(oldest, tokens_from(100, 10))}));
  EXPECT_EQ(ledger.cached_sequences(), 2);
}

TEST(KvLedger, WhenIdsRunOutTheOldestCachedOneButTheHitsSourceGoes) {
  PrefixCacheOptions options;
  options.trial_sequences = 8;
  options.min_tokens = 4;
  KvLedger ledger(3, 2, /*per_sequence=*/false, options);
  KvOps ops;
  const TokenList a = tokens_from(100, 10);
  const int id_a = finished_with(ledger, a, ops);  // the least recently used
  const int id_b = finished_with(ledger, tokens_from(200, 10), ops);
  const int running = ledger.acquire({}, ops);  // the third and last id
  ASSERT_TRUE(ops.empty());
  ledger.release(running, ops);
  ops.clear();
  const int running_again = ledger.acquire({}, ops);
  ASSERT_EQ(running_again, running);
  TokenList continues_a = a;
  continues_a.push_back(5);
  const PrefixLookup hit = hit_of(ledger, continues_a);
  ASSERT_EQ(hit.source, id_a);
  const int id = ledger.acquire(hit, ops);
  EXPECT_EQ(id, id_b);
  EXPECT_EQ(ops, (KvOps{eviction(id_b, tokens_from(200, 10))}));
}

TEST(KvLedger, WithABufferPerSequenceACachedSequenceIsTakenOverAndItsTailSaved) {
  PrefixCacheOptions options;
  options.min_tokens = 4;
  options.host_bytes = 1 << 20;
  KvLedger ledger(4, 4, /*per_sequence=*/true, options);
  KvOps ops;
  const TokenList turn = tokens_from(100, 20);
  const int cached = finished_with(ledger, turn, ops);
  // An edit of the conversation: the first 12 tokens again, then something else.
  TokenList edited = tokens_from(100, 12);
  edited.push_back(999);
  edited.push_back(998);
  const PrefixLookup hit = hit_of(ledger, edited);
  ASSERT_EQ(hit.tokens, 12);
  ASSERT_EQ(hit.source, cached);
  const int id = ledger.acquire(hit, ops);
  EXPECT_EQ(id, cached);
  EXPECT_EQ(ledger.attach(id, hit, edited, ops), 12);
  KvOp keep = op(KvOp::Kind::keep_prefix, cached, 12);
  keep.tokens_held = turn;
  EXPECT_EQ(ops, (KvOps{save(cached, turn), keep}));
  EXPECT_EQ(ledger.length(id), 12);
  EXPECT_EQ(ledger.running_sequences(), 1);
}

TEST(KvLedger, AHostHitIsRestoredAndForgottenWhenTheRestoreFails) {
  PrefixCacheOptions options;
  options.host_bytes = 1 << 20;
  KvLedger ledger = one_buffer(options);
  KvOps ops;
  const TokenList prompt = tokens_from(100, 20);
  PrefixLookup hit;
  hit.tokens = 16;
  hit.from_host = true;
  const int id = ledger.acquire(hit, ops);
  EXPECT_EQ(ledger.attach(id, hit, prompt, ops), 16);
  KvOp restore = op(KvOp::Kind::restore_from_host, id);
  restore.tokens_held = tokens_from(100, 16);
  EXPECT_EQ(ops, (KvOps{restore}));
  EXPECT_EQ(ledger.used_cells(), 16);
  ledger.restore_failed(id);
  EXPECT_EQ(ledger.used_cells(), 0);
  EXPECT_EQ(ledger.running_sequences(), 1);
}

TEST(KvLedger, APreemptedSequenceIsSavedWhenThereIsAHostTier) {
  PrefixCacheOptions options;
  options.host_bytes = 1 << 20;
  KvLedger ledger = one_buffer(options);
  KvOps ops;
  const int id = ledger.acquire({}, ops);
  const TokenList computed = tokens_from(100, 9);
  ledger.record(id, computed);
  ledger.swap_out(id, ops);
  EXPECT_EQ(ops, (KvOps{save(id, computed), op(KvOp::Kind::release, id)}));
  EXPECT_EQ(ledger.running_sequences(), 0);
  EXPECT_EQ(ledger.used_cells(), 0);
}

TEST(KvLedger, ASlidingWindowThatMovedPastTheMatchMakesItUnusable) {
  PrefixCacheOptions options;
  options.min_tokens = 4;
  int window_start = 0;
  KvLedger ledger(8, 4, false, options, {8, [&](int) { return window_start; }});
  KvOps ops;
  const TokenList prompt = tokens_from(100, 20);
  finished_with(ledger, prompt, ops);
  TokenList continues = prompt;
  continues.push_back(1);
  EXPECT_EQ(hit_of(ledger, continues).tokens, 20);
  window_start = 14;  // reusing 20 tokens attends to positions 13..19: 13 is gone
  const KvLedger::Match match =
      ledger.match(std::span(continues).first(continues.size() - 1), 4);
  EXPECT_EQ(match.tokens, 0);
  EXPECT_EQ(match.longest, 20);
}

}  // namespace
}  // namespace brisk
