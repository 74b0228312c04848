#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_set>
#include <vector>

#include "engine/model_runner.h"
#include "sched/host_prefix_cache.h"
#include "sched/prefix_tree.h"
#include "sched/serving_metrics.h"

namespace brisk {

struct PrefixCacheOptions {
  bool enabled = true;
  // A shorter match is not reused: it saves little compute and splits the tree.
  int min_tokens = 32;
  // Cached sequences no prompt has reused yet are kept at most this many, the oldest freed
  // first: in one KV buffer every step's attention spans the cells kept, so prompts that never
  // repeat would slow every running stream (docs/scheduling.md). A reused one stays until
  // evicted for room. With a buffer per sequence nobody attends to an idle one: no limit.
  int trial_sequences = 2;
  // The host-memory tier (--cache-ram): evicted sequences' KV state kept in this many bytes of
  // host memory and restored on a hit instead of recomputed; 0 turns it off.
  size_t host_bytes = 0;
};

// Why a request's prompt found no cached prefix to reuse (brisk_prefix_cache_misses_total).
// evicted: the KV cache held a longer prefix and freed it (with no host tier to keep it);
// host_evicted: the host tier held it and evicted it for bytes; restore_failed: the host tier
// held it but the KV cache had no room to restore it into.
enum class PrefixMiss {
  none,
  no_match,
  below_minimum,
  window_expired,
  evicted,
  host_evicted,
  restore_failed,
  disabled
};
const char* prefix_miss_name(PrefixMiss miss);

struct PrefixLookup {
  int tokens = 0;   // cached tokens the request reuses (0: a miss)
  int source = -1;  // the sequence whose cells it copies (KV tier)
  PrefixMiss miss = PrefixMiss::none;
  bool from_host = false;  // restored from the host tier into new cells
  // A later choice of an n > 1 request copying its own first choice's prompt: not a reuse by
  // another request, so it does not keep the source cached past its trial.
  bool within_request = false;

  // KV cells the request shares instead of taking new ones.
  int shared_cells() const { return from_host ? 0 : tokens; }
};

// Prefixes a cache tier let go of, by the hash of every kBlockTokens-token prefix (the newest
// few thousand): a miss on a prefix the tier once held is told apart from one it never saw.
class EvictedPrefixes {
 public:
  void remember(std::span<const Token> tokens);
  // Whether a prefix of `tokens` longer than `matched` was let go of.
  bool had_longer(std::span<const Token> tokens, int matched) const;

 private:
  std::unordered_set<uint64_t> hashes_;
  std::deque<uint64_t> order_;
};

// The engine's KV sequence ids and cells. A running request holds one sequence id; when it
// finishes, its id and cells stay in the cache (a "cached sequence") so later prompts that
// start with the same tokens reuse its cells instead of computing them. Cached sequences are
// evicted, least recently used first, when ids or cells are needed. Engine thread only.
//
// Two KV layouts (docs/scheduling.md, "KV layout"). In one buffer for all (--kv-unified) a
// reuse shares the cells: no memory is copied, and the ids beyond the running ones hold the
// cached prefixes. With a buffer per sequence (--no-kv-unified) every id is a running slot and
// an idle one keeps what its last request left: a prompt that continues it takes that id over
// (its cells stay where they are; a longer tail is saved to the host tier first), one that
// shares a running sequence's prefix gets a copy of the cells.
class KvManager {
 public:
  // The engine has `sequence_ids` ids; at most `running_limit` run at once. In one buffer the
  // rest hold cached prefixes.
  KvManager(ModelRunner& engine, int running_limit, int sequence_ids, PrefixCacheOptions options,
            ServingMetrics& metrics);

  bool cache_enabled() const { return options_.enabled; }
  // An id for a new running sequence whose prompt found `hit`: the hit's own cached id when
  // there are no ids beyond the running ones (always so with a buffer per sequence). Otherwise,
  // with a buffer per sequence, the id that keeps the running ones together (llama.cpp computes
  // each run of consecutive ids in a pass of its own), its cached cells evicted; in one buffer
  // a free id, else the least recently used cached one's (never the hit's source).
  int acquire(const PrefixLookup& hit = {});
  // The longest cached prefix of `tokens` a sequence may reuse, keeping at least one token to
  // compute (its logits start the completion).
  PrefixLookup lookup(std::span<const Token> tokens) const {
    return lookup_at_least(tokens, options_.min_tokens);
  }
  // The same for a later choice of an n > 1 request, whatever the prompt's length: the prefill
  // it skips is exactly the one its first choice already did, so no minimum applies.
  PrefixLookup lookup_shared_prompt(std::span<const Token> tokens) const {
    PrefixLookup hit = lookup_at_least(tokens, 1);
    hit.within_request = true;
    return hit;
  }
  // Gives the newly acquired `id` the cells of the hit of `prompt` (a host hit is restored into
  // new cells; a taken-over id keeps the hit's cells and frees the rest), counts the lookup in
  // the metrics, and returns the tokens reused: the hit's, or 0 when a host restore found no
  // room.
  int attach(int id, const PrefixLookup& hit, std::span<const Token> prompt);
  // After a successful decode: `id` computed `tokens` at its next positions.
  void record(int id, std::span<const Token> tokens);
  // A running sequence ends without leaving its cells to the cache (cancelled, failed).
  void release(int id);
  // A running sequence is preempted: its state is saved to the host tier when there is one (so
  // that it resumes by a restore, found by lookup like any cached prefix) and its id freed.
  // Whether it was saved.
  bool swap_out(int id);
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
  // The cells each row of a step attends over (StepCosts::set_attended_cells): every cell in
  // use in one buffer, cached prefixes included; with a buffer per sequence the running
  // sequences' own, on average.
  int attended_cells() const;
  const HostPrefixCache& host_tier() const { return host_; }

 private:
  enum class State { free, running, cached };
  PrefixLookup lookup_at_least(std::span<const Token> tokens, int min_tokens) const;
  bool window_allows(int source, int tokens) const;
  void end_oldest_trials();
  int compact_id() const;
  // `id` (free, or cached and kept) becomes a running sequence's.
  int start_running(int id);
  // Frees a cached sequence, first saving its state in the host tier when there is one.
  void evict(int id);
  bool save_to_host(int id, const TokenList& tokens);
  // The cached `id` becomes the running sequence of a prompt that reuses its first `tokens`.
  int take_over(int id, const PrefixLookup& hit, std::span<const Token> prompt);
  int restore_from_host(int id, const PrefixLookup& hit, std::span<const Token> prompt);
  bool host_usable(const HostPrefixCache::Entry& entry, int tokens) const;
  PrefixTree::Owners running_mask() const;

  ModelRunner& engine_;
  const bool per_sequence_;  // each sequence id has a KV buffer of its own
  // No ids beyond the running ones (always so with a buffer per sequence): a cached id is taken
  // over by the prompt that continues it.
  const bool takes_over_;
  const PrefixCacheOptions options_;
  ServingMetrics& metrics_;
  PrefixTree tree_;
  std::vector<State> state_;
  std::vector<uint64_t> last_used_;  // per id: when it last finished or served a hit
  std::vector<bool> reused_;         // per id: its cells served a hit since it was acquired
  uint64_t clock_ = 0;
  HostPrefixCache host_;
  EvictedPrefixes kv_evicted_;
  EvictedPrefixes host_evicted_;
};

}  // namespace brisk
