#include "sched/kv_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace brisk {
namespace {

constexpr size_t kEvictedBlockTokens = 64;
constexpr size_t kEvictedHashesKept = 8192;

uint64_t hash_tokens(std::span<const Token> tokens) {
  uint64_t hash = 1469598103934665603ull;
  for (Token token : tokens) hash = (hash ^ static_cast<uint64_t>(token)) * 1099511628211ull;
  return hash;
}

}  // namespace

const char* prefix_miss_name(PrefixMiss miss) {
  switch (miss) {
    case PrefixMiss::no_match:
      return "no_match";
    case PrefixMiss::below_minimum:
      return "below_minimum";
    case PrefixMiss::window_expired:
      return "window_expired";
    case PrefixMiss::evicted:
      return "evicted";
    case PrefixMiss::disabled:
      return "disabled";
    case PrefixMiss::none:
      break;
  }
  return "none";
}

KvManager::KvManager(ModelRunner& engine, int running_limit, int sequence_ids,
                     PrefixCacheOptions options, ServingMetrics& metrics)
    : engine_(engine),
      options_([&] {
        PrefixCacheOptions effective = options;
        effective.enabled = options.enabled && sequence_ids > running_limit &&
                            engine.sequence_context_size() == engine.context_size();
        return effective;
      }()),
      metrics_(metrics),
      state_(static_cast<size_t>(std::min(sequence_ids, PrefixTree::kMaxSequences)), State::free),
      last_used_(state_.size(), 0) {
  if (options.enabled && !options_.enabled) {
    spdlog::info(
        "prefix cache off: it needs one KV buffer for all requests (--kv-unified) and --max-seqs "
        "below {}", PrefixTree::kMaxSequences);
  }
}

int KvManager::acquire(int keep) {
  for (size_t id = 0; id < state_.size(); ++id) {
    if (state_[id] == State::free) {
      state_[id] = State::running;
      return static_cast<int>(id);
    }
  }
  if (!evict_oldest(keep)) return -1;
  return acquire(keep);
}

PrefixLookup KvManager::lookup(std::span<const Token> tokens) const {
  PrefixLookup result;
  if (!options_.enabled) {
    result.miss = PrefixMiss::disabled;
  } else if (tokens.size() > 1) {
    const PrefixTree::Match match = tree_.match(tokens.first(tokens.size() - 1));
    if (match.tokens >= options_.min_tokens) {
      for (size_t id = 0; id < state_.size(); ++id) {
        if (match.owners.test(id) && window_allows(static_cast<int>(id), match.tokens)) {
          result.tokens = match.tokens;
          result.source = static_cast<int>(id);
          break;
        }
      }
      if (result.source < 0) result.miss = PrefixMiss::window_expired;
    } else if (was_evicted(tokens, match.tokens)) {
      result.miss = PrefixMiss::evicted;
    } else {
      result.miss = match.tokens > 0 ? PrefixMiss::below_minimum : PrefixMiss::no_match;
    }
  } else {
    result.miss = PrefixMiss::no_match;
  }
  return result;
}

// On a sliding-window model a new sequence reusing `tokens` cells attends, from position
// `tokens` on, to the window before it: the source must still hold those cells (llama.cpp
// reuses the masked cells of a sequence that owns them alone when it needs room).
bool KvManager::window_allows(int source, int tokens) const {
  const int window = engine_.sliding_window_tokens();
  if (window <= 0) return true;
  return engine_.sequence_window_start(source) <= std::max(0, tokens - window + 1);
}

void KvManager::attach(int id, const PrefixLookup& hit, int query_tokens) {
  metrics_.observe_prefix_lookup(query_tokens, hit.tokens, prefix_miss_name(hit.miss));
  if (hit.tokens <= 0) return;
  engine_.copy_sequence_prefix(hit.source, id, hit.tokens);
  tree_.share(id, hit.source, hit.tokens);
  if (state_[static_cast<size_t>(hit.source)] != State::cached) return;
  last_used_[static_cast<size_t>(hit.source)] = ++clock_;
  // A cached sequence whose every cell the newcomer now shares adds nothing: free its id.
  if (tree_.exclusive_cells(hit.source) == 0) {
    tree_.release(hit.source);
    engine_.release_sequence(hit.source);
    state_[static_cast<size_t>(hit.source)] = State::free;
  }
}

void KvManager::record(int id, std::span<const Token> tokens) { tree_.append(id, tokens); }

void KvManager::release(int id) {
  tree_.release(id);
  engine_.release_sequence(id);
  state_[static_cast<size_t>(id)] = State::free;
}

void KvManager::retire(int id) {
  if (!options_.enabled || tree_.length(id) == 0) {
    release(id);
    return;
  }
  state_[static_cast<size_t>(id)] = State::cached;
  last_used_[static_cast<size_t>(id)] = ++clock_;
}

bool KvManager::evict_oldest(int keep) {
  int oldest = -1;
  for (size_t id = 0; id < state_.size(); ++id) {
    if (state_[id] != State::cached || static_cast<int>(id) == keep) continue;
    if (oldest < 0 || last_used_[id] < last_used_[static_cast<size_t>(oldest)]) {
      oldest = static_cast<int>(id);
    }
  }
  if (oldest < 0) return false;
  remember_evicted(oldest);
  release(oldest);
  metrics_.count_prefix_eviction();
  return true;
}

void KvManager::remember_evicted(int id) {
  const TokenList tokens = tree_.tokens(id);
  for (size_t end = kEvictedBlockTokens; end <= tokens.size(); end += kEvictedBlockTokens) {
    const uint64_t hash = hash_tokens(std::span<const Token>(tokens).first(end));
    if (!evicted_hashes_.insert(hash).second) continue;
    evicted_order_.push_back(hash);
    if (evicted_order_.size() > kEvictedHashesKept) {
      evicted_hashes_.erase(evicted_order_.front());
      evicted_order_.pop_front();
    }
  }
}

// Whether the cache once held a longer prefix of `tokens` than the `matched` it holds now.
bool KvManager::was_evicted(std::span<const Token> tokens, int matched) const {
  const size_t end = (static_cast<size_t>(matched) / kEvictedBlockTokens + 1) * kEvictedBlockTokens;
  if (end >= tokens.size()) return false;
  return evicted_hashes_.contains(hash_tokens(tokens.first(end)));
}

PrefixTree::Owners KvManager::running_mask() const {
  PrefixTree::Owners mask;
  for (size_t id = 0; id < state_.size(); ++id) mask.set(id, state_[id] == State::running);
  return mask;
}

int KvManager::cached_cells() const { return tree_.cells_outside(running_mask()); }

int KvManager::evictable_cells(int keep) const {
  PrefixTree::Owners mask = running_mask();
  if (keep >= 0) mask.set(static_cast<size_t>(keep));
  return tree_.cells_outside(mask);
}

int KvManager::cached_sequences() const {
  return static_cast<int>(std::count(state_.begin(), state_.end(), State::cached));
}

int KvManager::running_sequences() const {
  return static_cast<int>(std::count(state_.begin(), state_.end(), State::running));
}

}  // namespace brisk
