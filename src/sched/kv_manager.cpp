#include "sched/kv_manager.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace brisk {

KvManager::KvManager(ModelRunner& engine, int running_limit, int sequence_ids,
                     PrefixCacheOptions options, ServingMetrics& metrics)
    : engine_(engine),
      metrics_(metrics),
      ledger_(sequence_ids, running_limit,
              engine.sequence_context_size() < engine.context_size(), options,
              KvWindow{engine.sliding_window_tokens(),
                               [&engine](int id) { return engine.sequence_window_start(id); }}),
      host_(ledger_.cache_enabled() ? options.host_bytes : 0) {
  metrics_.set_host_tier(0, 0, host_.capacity_bytes());
  if (options.enabled && !ledger_.cache_enabled()) {
    spdlog::info("prefix cache off: it keeps at most {} sequences", PrefixTree::kMaxSequences);
  }
}

int KvManager::acquire(const PrefixLookup& hit) {
  const int id = ledger_.acquire(hit, ops_);
  apply(ops_);
  return id;
}

PrefixLookup KvManager::lookup_at_least(std::span<const Token> tokens, int min_tokens) const {
  PrefixLookup result;
  if (!ledger_.cache_enabled()) {
    result.miss = PrefixMiss::disabled;
    return result;
  }
  if (tokens.size() <= 1) {
    result.miss = PrefixMiss::no_match;
    return result;
  }
  // One token is always left to compute: its logits start the completion.
  const std::span<const Token> query = tokens.first(tokens.size() - 1);
  const KvLedger::Match match = ledger_.match(query, min_tokens);
  result.tokens = match.tokens;
  result.source = match.source;
  // The host tier serves what the KV cache holds less of (nothing when it holds all of it).
  const HostPrefixCache::Match stored =
      result.tokens == static_cast<int>(query.size())
          ? HostPrefixCache::Match{}
          : host_.match(query, [&](const HostPrefixCache::Entry& entry, int n) {
              return host_usable(entry, n);
            });
  if (stored.tokens >= min_tokens && stored.tokens > result.tokens) {
    result = {stored.tokens, -1, PrefixMiss::none, true};
  }
  if (result.tokens > 0) return result;
  const int longest = std::max(match.longest, stored.tokens);
  if (match.longest >= min_tokens) {
    result.miss = PrefixMiss::window_expired;
  } else if (host_evicted_.had_longer(tokens, longest)) {
    result.miss = PrefixMiss::host_evicted;
  } else if (ledger_.evicted_longer(tokens, longest)) {
    result.miss = PrefixMiss::evicted;
  } else {
    result.miss = longest > 0 ? PrefixMiss::below_minimum : PrefixMiss::no_match;
  }
  return result;
}

// A host entry serves `tokens` positions when its sliding-window cells cover the window before
// them (the same rule as a KV source's).
bool KvManager::host_usable(const HostPrefixCache::Entry& entry, int tokens) const {
  const int window = engine_.sliding_window_tokens();
  return window <= 0 || entry.window_start <= std::max(0, tokens - window + 1);
}

int KvManager::attach(int id, const PrefixLookup& hit, std::span<const Token> prompt) {
  const int query_tokens = static_cast<int>(prompt.size());
  int reused = ledger_.attach(id, hit, prompt, ops_);
  if (!apply(ops_).restored) {
    ledger_.restore_failed(id);
    reused = 0;
  }
  metrics_.observe_prefix_lookup(
      query_tokens, reused,
      prefix_miss_name(hit.from_host ? PrefixMiss::restore_failed : hit.miss));
  return reused;
}

void KvManager::release(int id) {
  ledger_.release(id, ops_);
  apply(ops_);
}

bool KvManager::swap_out(int id) {
  ledger_.swap_out(id, ops_);
  return apply(ops_).saved;
}

void KvManager::retire(int id) {
  ledger_.retire(id, ops_);
  apply(ops_);
}

bool KvManager::evict_oldest(int keep) {
  const bool evicted = ledger_.evict_oldest(keep, ops_);
  apply(ops_);
  return evicted;
}

// The ledger's ops on the model runner, in order (a state is saved before its cells go), and
// cleared.
KvManager::Applied KvManager::apply(KvOps& ops) {
  Applied applied;
  for (const KvOp& op : ops) {
    switch (op.kind) {
      case KvOp::Kind::copy_prefix:
        engine_.copy_sequence_prefix(op.source, op.id, op.tokens);
        break;
      case KvOp::Kind::keep_prefix:
        engine_.keep_sequence_prefix(op.id, op.tokens);
        break;
      case KvOp::Kind::save_to_host:
        applied.saved = save_to_host(op.id, op.tokens_held) || applied.saved;
        break;
      case KvOp::Kind::release:
        engine_.release_sequence(op.id);
        if (op.eviction) metrics_.count_prefix_eviction();
        break;
      case KvOp::Kind::restore_from_host:
        applied.restored = restore_from_host(op.id, op.tokens_held) && applied.restored;
        break;
    }
  }
  ops.clear();
  return applied;
}

// The entry is found again by its tokens: making room since the lookup may have saved a longer
// state that replaced it.
bool KvManager::restore_from_host(int id, const TokenList& tokens) {
  const int wanted = static_cast<int>(tokens.size());
  const HostPrefixCache::Match stored =
      host_.match(tokens, [&](const HostPrefixCache::Entry& entry, int n) {
        return host_usable(entry, n);
      });
  if (stored.tokens < wanted) return false;
  const auto started = std::chrono::steady_clock::now();
  if (!engine_.restore_sequence(id, stored.entry->state, wanted)) return false;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  metrics_.count_host_restore(wanted, stored.entry->state.size(), seconds);
  host_.touch(stored.entry->id);
  return true;
}

bool KvManager::save_to_host(int id, const TokenList& tokens) {
  bool stored = false;
  const auto started = std::chrono::steady_clock::now();
  std::vector<uint8_t> state = engine_.save_sequence(id);
  const size_t bytes = state.size();
  for (const TokenList& dropped :
       host_.insert(tokens, std::move(state), engine_.sequence_window_start(id), &stored)) {
    host_evicted_.remember(dropped);
    metrics_.count_host_eviction();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (stored) metrics_.count_host_save(bytes, seconds);
  metrics_.set_host_tier(host_.bytes(), host_.entries(), host_.capacity_bytes());
  return stored;
}

}  // namespace brisk
