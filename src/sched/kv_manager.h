#pragma once

#include <span>

#include "engine/model_runner.h"
#include "sched/host_prefix_cache.h"
#include "sched/kv_ledger.h"
#include "sched/serving_metrics.h"

namespace brisk {

// The engine's KV sequence ids and cells. A running request holds one sequence id; when it
// finishes, its id and cells stay in the cache (a "cached sequence") so later prompts that
// start with the same tokens reuse its cells instead of computing them. Cached sequences are
// evicted, least recently used first, when ids or cells are needed. Engine thread only.
//
// What is held where is decided by the KvLedger (sched/kv_ledger.h), which never touches the
// model runner; KvManager applies the ledger's KvOps to the runner as they are decided, keeps
// the host-memory tier's states, and counts it all in the metrics.
class KvManager {
 public:
  // The engine has `sequence_ids` ids; at most `running_limit` run at once. In one buffer the
  // rest hold cached prefixes.
  KvManager(ModelRunner& engine, int running_limit, int sequence_ids, PrefixCacheOptions options,
            ServingMetrics& metrics);

  bool cache_enabled() const { return ledger_.cache_enabled(); }
  // An id for a new running sequence whose prompt found `hit` (KvLedger::acquire).
  int acquire(const PrefixLookup& hit = {});
  // The longest cached prefix of `tokens` a sequence may reuse, keeping at least one token to
  // compute (its logits start the completion).
  PrefixLookup lookup(std::span<const Token> tokens) const {
    return lookup_at_least(tokens, ledger_.options().min_tokens);
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
  void record(int id, std::span<const Token> tokens) { ledger_.record(id, tokens); }
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

  const KvLedger& ledger() const { return ledger_; }
  int used_cells() const { return ledger_.used_cells(); }
  int cached_cells() const { return ledger_.cached_cells(); }
  int evictable_cells(int keep) const { return ledger_.evictable_cells(keep); }
  int cached_sequences() const { return ledger_.cached_sequences(); }
  int running_sequences() const { return ledger_.running_sequences(); }
  int attended_cells() const { return ledger_.attended_cells(); }
  const HostPrefixCache& host_tier() const { return host_; }

 private:
  // What applying a change's ops did that its caller asks about.
  struct Applied {
    bool saved = false;     // a save_to_host op stored its state
    bool restored = true;   // no restore_from_host op failed
  };
  PrefixLookup lookup_at_least(std::span<const Token> tokens, int min_tokens) const;
  Applied apply(KvOps& ops);
  bool save_to_host(int id, const TokenList& tokens);
  bool restore_from_host(int id, const TokenList& tokens);
  bool host_usable(const HostPrefixCache::Entry& entry, int tokens) const;

  ModelRunner& engine_;
  ServingMetrics& metrics_;
  KvLedger ledger_;
  KvOps ops_;  // scratch: the ops of the change being applied
  HostPrefixCache host_;
  EvictedPrefixes host_evicted_;
};

}  // namespace brisk
