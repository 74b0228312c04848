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

PrefixLookup KvManager::lookup_in(const KvLedger& ledger, std::span<const Token> tokens,
                                  bool shared_prompt) const {
  const int min_tokens = shared_prompt ? 1 : ledger.options().min_tokens;
  PrefixLookup result = lookup_in_ledger(ledger, tokens, min_tokens);
  result.within_request = shared_prompt;
  if (result.miss == PrefixMiss::disabled || tokens.size() <= 1) return result;
  // The host tier serves what the KV cache holds less of (nothing when it holds all of it).
  const std::span<const Token> query = tokens.first(tokens.size() - 1);
  const HostPrefixCache::Match stored =
      result.tokens == static_cast<int>(query.size())
          ? HostPrefixCache::Match{}
          : host_.match(query, [&](const HostPrefixCache::Entry& entry, int n) {
              return host_usable(entry, n);
            });
  if (stored.tokens >= min_tokens && stored.tokens > result.tokens) {
    result.tokens = stored.tokens;
    result.source = -1;
    result.miss = PrefixMiss::none;
    result.from_host = true;
    return result;
  }
  if (result.tokens > 0 || result.miss == PrefixMiss::window_expired) return result;
  // No match long enough in either tier: a longer prefix one of them let go of says why.
  const int longest = std::max(result.longest_in_kv, stored.tokens);
  if (host_evicted_.had_longer(tokens, longest)) {
    result.miss = PrefixMiss::host_evicted;
  } else if (kv_evicted_.had_longer(tokens, longest)) {
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

void KvManager::release(int id) {
  ledger_.release(id, ops_);
  apply(ops_);
}

void KvManager::retire(int id) {
  ledger_.retire(id, ops_);
  apply(ops_);
}

KvManager::Adopted KvManager::adopt(KvLedger ledger, KvOps& ops) {
  ledger_ = std::move(ledger);
  Adopted adopted;
  apply(ops, &adopted);
  for (int id : adopted.failed_restores) ledger_.restore_failed(id);
  return adopted;
}

// The ledger's ops on the model runner, in order (a state is saved before its cells go), and
// cleared.
void KvManager::apply(KvOps& ops, Adopted* adopted) {
  for (const KvOp& op : ops) {
    switch (op.kind) {
      case KvOp::Kind::copy_prefix:
        engine_.copy_sequence_prefix(op.source, op.id, op.tokens);
        break;
      case KvOp::Kind::keep_prefix:
        kv_evicted_.remember(op.tokens_held);
        engine_.keep_sequence_prefix(op.id, op.tokens);
        break;
      case KvOp::Kind::save_to_host:
        if (save_to_host(op.id, op.tokens_held) && adopted) adopted->saved.push_back(op.id);
        break;
      case KvOp::Kind::release:
        engine_.release_sequence(op.id);
        if (op.eviction) {
          kv_evicted_.remember(op.tokens_held);
          metrics_.count_prefix_eviction();
        }
        break;
      case KvOp::Kind::restore_from_host:
        if (!restore_from_host(op.id, op.tokens_held) && adopted) {
          adopted->failed_restores.push_back(op.id);
        }
        break;
    }
  }
  ops.clear();
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
