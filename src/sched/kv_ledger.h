#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <unordered_set>
#include <vector>

#include "engine/token.h"
#include "sched/prefix_tree.h"

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
  int longest_in_kv = 0;  // the longest prefix the KV cells hold, reusable or not
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

// One thing the KV cache must do to hold what the ledger says, in the order the ledger decided
// it (KvManager applies them to the model runner).
struct KvOp {
  enum class Kind {
    copy_prefix,        // `id` (holding nothing) shares `source`'s first `tokens` cells
    keep_prefix,        // `id` keeps its first `tokens` cells and frees the rest (it held
                        // `tokens_held`)
    save_to_host,       // `id`'s state, the positions `tokens_held`, goes to the host tier
    release,            // `id` frees every cell (an eviction's held `tokens_held`)
    restore_from_host,  // `id` (holding nothing) gets the host tier's state of `tokens_held`
  };
  Kind kind = Kind::release;
  int id = -1;
  int source = -1;  // copy_prefix
  int tokens = 0;   // copy_prefix, keep_prefix
  TokenList tokens_held;
  bool eviction = false;  // release: a cached sequence freed for room

  bool operator==(const KvOp&) const = default;
};
using KvOps = std::vector<KvOp>;

// The sliding window of the model's KV cells (0 tokens: none) and where a sequence's window now
// starts: llama.cpp reuses the masked cells of a sequence that owns them alone.
struct KvWindow {
  int tokens = 0;
  std::function<int(int id)> start;
};

// The KV cache's bookkeeping, without the cache: which sequence ids run, which hold a finished
// request's cells for reuse (cached) and which are free; the cells each holds (the prefix tree);
// which cached one was used least recently; which ones no prompt has reused yet. Every change
// appends the KvOps that make the cache match it, and reads nothing of the model runner but
// the sliding window, so it is tested on hand-built states and (later) planned on a copy.
//
// Two KV layouts (docs/scheduling.md, "KV layout"). In one buffer for all (--kv-unified) a
// reuse shares the cells: no memory is copied, and the ids beyond the running ones hold the
// cached prefixes. With a buffer per sequence (--no-kv-unified) every id is a running slot and
// an idle one keeps what its last request left: a prompt that continues it takes that id over
// (its cells stay where they are; a longer tail is saved to the host tier first), one that
// shares a running sequence's prefix gets a copy of the cells.
class KvLedger {
 public:
  // What the longest cached prefix in the KV cells is.
  struct Match {
    int tokens = 0;   // reusable (window and minimum allowing): 0 when none
    int source = -1;
    int longest = 0;  // the longest match, reusable or not
  };

  // `sequence_ids` ids, at most `running_limit` running at once; `per_sequence`: each id has a
  // KV buffer of its own. Saves to the host tier are emitted when options.host_bytes > 0.
  KvLedger(int sequence_ids, int running_limit, bool per_sequence, PrefixCacheOptions options,
           KvWindow window = {});

  bool cache_enabled() const { return options_.enabled; }
  bool host_tier_enabled() const { return options_.enabled && options_.host_bytes > 0; }
  const PrefixCacheOptions& options() const { return options_; }

  // The longest prefix of `query` some sequence's cells hold, at least `min_tokens` long and
  // reusable from there on (its window still held); a cached owner that can be taken over is
  // preferred to a running one.
  Match match(std::span<const Token> query, int min_tokens) const;

  // An id for a new running sequence whose prompt found `hit`: the hit's own cached id when
  // there are no ids beyond the running ones (always so with a buffer per sequence). Otherwise,
  // with a buffer per sequence, the id that keeps the running ones together (llama.cpp computes
  // each run of consecutive ids in a pass of its own), its cached cells evicted; in one buffer
  // a free id, else the least recently used cached one's (never the hit's source). -1: none.
  int acquire(const PrefixLookup& hit, KvOps& ops);
  // The newly acquired `id` gets the hit's cells of `prompt` (shared, taken over, or restored
  // from the host tier); returns the tokens reused.
  int attach(int id, const PrefixLookup& hit, std::span<const Token> prompt, KvOps& ops);
  // A restore from the host tier that attach asked for did not happen: `id` holds nothing.
  void restore_failed(int id) { tree_.release(id); }
  // After a successful decode: `id` computed `tokens` at its next positions.
  void record(int id, std::span<const Token> tokens) { tree_.append(id, tokens); }
  // A running sequence ends without leaving its cells to the cache (cancelled, failed).
  void release(int id, KvOps& ops);
  // A running sequence is preempted: its state goes to the host tier when there is one (so
  // that it resumes by a restore, found like any cached prefix) and its id is freed.
  void swap_out(int id, KvOps& ops);
  // A running sequence finished: its cells stay cached (or are freed when caching is off).
  void retire(int id, KvOps& ops);
  // Frees the least recently used cached sequence but `keep`; false when there is none.
  bool evict_oldest(int keep, KvOps& ops);

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
  int length(int id) const { return tree_.length(id); }

 private:
  enum class State { free, running, cached };
  bool window_allows(int source, int tokens) const;
  void end_oldest_trials(KvOps& ops);
  int compact_id() const;
  // `id` (free, or cached and kept) becomes a running sequence's.
  int start_running(int id);
  // Frees a cached sequence, first saving its state in the host tier when there is one.
  void evict(int id, KvOps& ops);
  // The cached `id` becomes the running sequence of a prompt that reuses its first `tokens`.
  int take_over(int id, const PrefixLookup& hit, std::span<const Token> prompt, KvOps& ops);
  PrefixTree::Owners running_mask() const;

  bool per_sequence_;
  // No ids beyond the running ones (always so with a buffer per sequence): a cached id is taken
  // over by the prompt that continues it.
  bool takes_over_;
  PrefixCacheOptions options_;
  KvWindow window_;
  PrefixTree tree_;
  std::vector<State> state_;
  std::vector<uint64_t> last_used_;  // per id: when it last finished or served a hit
  std::vector<bool> reused_;         // per id: its cells served a hit since it was acquired
  uint64_t clock_ = 0;
};

// A prompt's longest reusable prefix in the ledger's KV cells alone (KvManager::lookup_in adds
// the host tier and the misses' causes), keeping at least one token to compute.
PrefixLookup lookup_in_ledger(const KvLedger& ledger, std::span<const Token> tokens,
                              int min_tokens);

}  // namespace brisk
