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
// model runner: the step planner changes a copy of it, and KvManager adopts that copy and
// applies its KvOps to the runner; it also keeps the host-memory tier's states and counts it
// all in the metrics.
class KvManager {
 public:
  // The engine has `sequence_ids` ids; at most `running_limit` run at once. In one buffer the
  // rest hold cached prefixes.
  KvManager(ModelRunner& engine, int running_limit, int sequence_ids, PrefixCacheOptions options,
            ServingMetrics& metrics);

  bool cache_enabled() const { return ledger_.cache_enabled(); }
  // The longest cached prefix of `tokens` a sequence may reuse in `ledger` (the planner's
  // copy of this one's) or this host tier, keeping at least one token to compute (its logits
  // start the completion). For a later choice of an n > 1 request (`shared_prompt`) whatever
  // the prompt's length: the prefill it skips is exactly the one its first choice already did,
  // so no minimum applies.
  PrefixLookup lookup_in(const KvLedger& ledger, std::span<const Token> tokens,
                         bool shared_prompt) const;
  // After a successful decode: `id` computed `tokens` at its next positions.
  void record(int id, std::span<const Token> tokens) { ledger_.record(id, tokens); }
  // A running sequence ends without leaving its cells to the cache (cancelled, failed).
  void release(int id);
  // A running sequence finished: its cells stay cached (or are freed when caching is off).
  void retire(int id);

  const KvLedger& ledger() const { return ledger_; }
  // What a planner decided from a copy of the ledger: `ledger` becomes this one and `ops`, which
  // lead there, are applied to the model runner. The ids whose restore from the host tier
  // failed (they hold nothing) and those whose state was saved to the host tier come back.
  struct Adopted {
    std::vector<int> failed_restores;
    std::vector<int> saved;
  };
  Adopted adopt(KvLedger ledger, KvOps& ops);
  int used_cells() const { return ledger_.used_cells(); }
  int cached_cells() const { return ledger_.cached_cells(); }
  int cached_sequences() const { return ledger_.cached_sequences(); }
  int running_sequences() const { return ledger_.running_sequences(); }
  int attended_cells() const { return ledger_.attended_cells(); }
  const HostPrefixCache& host_tier() const { return host_; }

 private:
  void apply(KvOps& ops, Adopted* adopted = nullptr);
  bool save_to_host(int id, const TokenList& tokens);
  bool restore_from_host(int id, const TokenList& tokens);
  bool host_usable(const HostPrefixCache::Entry& entry, int tokens) const;

  ModelRunner& engine_;
  ServingMetrics& metrics_;
  KvLedger ledger_;
  KvOps ops_;  // scratch: the ops of release() and retire()
  HostPrefixCache host_;
  EvictedPrefixes kv_evicted_;
  EvictedPrefixes host_evicted_;
};

}  // namespace brisk
