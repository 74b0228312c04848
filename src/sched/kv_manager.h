#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_set>
#include <vector>

#include "engine/model_runner.h"
#include "sched/prefix_tree.h"
#include "sched/serving_metrics.h"

namespace brisk {

struct PrefixCacheOptions {
  bool enabled = true;
  // A shorter match is not reused: it saves little compute and splits the tree.
  int min_tokens = 32;
};

// Why a request's prompt found no cached prefix to reuse (brisk_prefix_cache_misses_total).
enum class PrefixMiss { none, no_match, below_minimum, window_expired, evicted, disabled };
const char* prefix_miss_name(PrefixMiss miss);

struct PrefixLookup {
  int tokens = 0;   // cached tokens the request reuses (0: a miss)
  int source = -1;  // the sequence whose cells it copies
  PrefixMiss miss = PrefixMiss::none;
};

// The engine's KV sequence ids and cells. A running request holds one sequence id; when it
// finishes, its id and cells stay in the cache (a "cached sequence") so later prompts that
// start with the same tokens copy its cells instead of computing them (the unified cache
// shares cells between ids: no memory is copied). Cached sequences are evicted, least recently
// used first, when ids or cells are needed. Engine thread only.
class KvManager {
 public:
  // The engine has `sequence_ids` ids; at most `running_limit` run at once, the rest can hold
  // cached prefixes. Caching needs at least one id beyond the running ones and a unified cache.
  KvManager(ModelRunner& engine, int running_limit, int sequence_ids, PrefixCacheOptions options,
            ServingMetrics& metrics);

  bool cache_enabled() const { return options_.enabled; }
  // A free id for a new running sequence, evicting a cached one if need be (never `keep`).
  int acquire(int keep = -1);
  // The longest cached prefix of `tokens` a sequence may reuse, keeping at least one token to
  // compute (its logits start the completion).
  PrefixLookup lookup(std::span<const Token> tokens) const;
  // Gives the newly acquired `id` the cells of the hit, and counts the lookup of its
  // `query_tokens` in the metrics.
  void attach(int id, const PrefixLookup& hit, int query_tokens);
  // After a successful decode: `id` computed `tokens` at its next positions.
  void record(int id, std::span<const Token> tokens);
  // A running sequence ends without leaving its cells to the cache (cancelled, failed,
  // preempted).
  void release(int id);
  // A running sequence finished: its cells stay cached (or are freed when caching is off).
  void retire(int id);
  // Frees the least recently used cached sequence but `keep`; false when there is none.
  bool evict_oldest(int keep = -1);

  // Cells held by anyone, and by cached sequences alone (what evicting them all frees).
  int used_cells() const { return tree_.cells(); }
  int cached_cells() const;
  // What evicting every cached sequence but `keep` would free.
  int evictable_cells(int keep) const;
  int cached_sequences() const;
  int running_sequences() const;

 private:
  enum class State { free, running, cached };
  bool window_allows(int source, int tokens) const;
  void remember_evicted(int id);
  bool was_evicted(std::span<const Token> tokens, int matched) const;
  PrefixTree::Owners running_mask() const;

  ModelRunner& engine_;
  const PrefixCacheOptions options_;
  ServingMetrics& metrics_;
  PrefixTree tree_;
  std::vector<State> state_;
  std::vector<uint64_t> last_used_;  // per id: when it last finished or served a hit
  uint64_t clock_ = 0;
  // Hashes of evicted prefixes (every kEvictedBlockTokens tokens), oldest first, so a miss
  // on a prefix the cache once held is told apart from one it never saw.
  std::unordered_set<uint64_t> evicted_hashes_;
  std::deque<uint64_t> evicted_order_;
};

}  // namespace brisk
