#include "sched/kv_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <tuple>

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

void EvictedPrefixes::remember(std::span<const Token> tokens) {
  for (size_t end = kEvictedBlockTokens; end <= tokens.size(); end += kEvictedBlockTokens) {
    const uint64_t hash = hash_tokens(tokens.first(end));
    if (!hashes_.insert(hash).second) continue;
    order_.push_back(hash);
    if (order_.size() > kEvictedHashesKept) {
      hashes_.erase(order_.front());
      order_.pop_front();
    }
  }
}

bool EvictedPrefixes::had_longer(std::span<const Token> tokens, int matched) const {
  const size_t end = (static_cast<size_t>(matched) / kEvictedBlockTokens + 1) * kEvictedBlockTokens;
  if (end >= tokens.size()) return false;
  return hashes_.contains(hash_tokens(tokens.first(end)));
}

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
    case PrefixMiss::host_evicted:
      return "host_evicted";
    case PrefixMiss::restore_failed:
      return "restore_failed";
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
      per_sequence_(engine.sequence_context_size() < engine.context_size()),
      takes_over_(per_sequence_ || sequence_ids <= running_limit),
      options_([&] {
        PrefixCacheOptions effective = options;
        effective.enabled = options.enabled && sequence_ids <= PrefixTree::kMaxSequences;
        return effective;
      }()),
      metrics_(metrics),
      state_(static_cast<size_t>(std::min(sequence_ids, PrefixTree::kMaxSequences)), State::free),
      last_used_(state_.size(), 0),
      reused_(state_.size(), false),
      host_(options_.enabled ? options.host_bytes : 0) {
  metrics_.set_host_tier(0, 0, host_.capacity_bytes());
  if (options.enabled && !options_.enabled) {
    spdlog::info("prefix cache off: it keeps at most {} sequences", PrefixTree::kMaxSequences);
  }
}

int KvManager::acquire(const PrefixLookup& hit) {
  if (takes_over_ && hit.tokens > 0 && !hit.from_host && hit.source >= 0 &&
      state_[static_cast<size_t>(hit.source)] == State::cached) {
    return start_running(hit.source);
  }
  if (per_sequence_) {
    const int id = compact_id();
    if (id < 0) return -1;
    if (state_[static_cast<size_t>(id)] == State::cached) evict(id);
    return start_running(id);
  }
  for (;;) {
    const auto free = std::find(state_.begin(), state_.end(), State::free);
    if (free != state_.end()) return start_running(static_cast<int>(free - state_.begin()));
    if (!evict_oldest(hit.source)) return -1;
  }
}

int KvManager::start_running(int id) {
  state_[static_cast<size_t>(id)] = State::running;
  reused_[static_cast<size_t>(id)] = false;
  return id;
}

// llama.cpp computes each run of consecutive running ids in a pass of its own (StepPlan): the
// id that leaves the fewest runs (one joining two runs, then one extending a run), a free one
// before a cached one, the least recently used of the cached.
int KvManager::compact_id() const {
  auto running = [&](size_t id) { return id < state_.size() && state_[id] == State::running; };
  int best = -1;
  std::tuple<int, int, uint64_t> best_key;
  for (size_t id = 0; id < state_.size(); ++id) {
    if (state_[id] == State::running) continue;
    const int neighbours = (id > 0 && running(id - 1)) + running(id + 1);
    const std::tuple<int, int, uint64_t> key = {
        -neighbours, state_[id] == State::free ? 0 : 1,
        state_[id] == State::free ? id : last_used_[id]};
    if (best < 0 || key < best_key) {
      best = static_cast<int>(id);
      best_key = key;
    }
  }
  return best;
}

PrefixLookup KvManager::lookup_at_least(std::span<const Token> tokens, int min_tokens) const {
  PrefixLookup result;
  if (!options_.enabled) {
    result.miss = PrefixMiss::disabled;
    return result;
  }
  if (tokens.size() <= 1) {
    result.miss = PrefixMiss::no_match;
    return result;
  }
  // One token is always left to compute: its logits start the completion.
  const std::span<const Token> query = tokens.first(tokens.size() - 1);
  const PrefixTree::Match match = tree_.match(query);
  if (match.tokens >= min_tokens) {
    for (size_t id = 0; id < state_.size(); ++id) {
      if (!match.owners.test(id) || !window_allows(static_cast<int>(id), match.tokens)) continue;
      // A cached owner that can be taken over is, rather than copied: the first found.
      if (result.source < 0 || (takes_over_ && state_[id] == State::cached &&
                                state_[static_cast<size_t>(result.source)] != State::cached)) {
        result.tokens = match.tokens;
        result.source = static_cast<int>(id);
      }
    }
  }
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
  const int longest = std::max(match.tokens, stored.tokens);
  if (match.tokens >= min_tokens) {
    result.miss = PrefixMiss::window_expired;
  } else if (host_evicted_.had_longer(tokens, longest)) {
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

// On a sliding-window model a new sequence reusing `tokens` cells attends, from position
// `tokens` on, to the window before it: the source must still hold those cells (llama.cpp
// reuses the masked cells of a sequence that owns them alone when it needs room).
bool KvManager::window_allows(int source, int tokens) const {
  const int window = engine_.sliding_window_tokens();
  if (window <= 0) return true;
  return engine_.sequence_window_start(source) <= std::max(0, tokens - window + 1);
}

int KvManager::attach(int id, const PrefixLookup& hit, std::span<const Token> prompt) {
  const int query_tokens = static_cast<int>(prompt.size());
  if (hit.from_host) {
    const int restored = restore_from_host(id, hit, prompt);
    metrics_.observe_prefix_lookup(query_tokens, restored,
                                   prefix_miss_name(PrefixMiss::restore_failed));
    return restored;
  }
  metrics_.observe_prefix_lookup(query_tokens, hit.tokens, prefix_miss_name(hit.miss));
  if (hit.tokens <= 0) return 0;
  if (id == hit.source) return take_over(id, hit, prompt);
  engine_.copy_sequence_prefix(hit.source, id, hit.tokens);
  tree_.share(id, hit.source, hit.tokens);
  if (!hit.within_request) reused_[static_cast<size_t>(hit.source)] = true;
  if (state_[static_cast<size_t>(hit.source)] != State::cached) return hit.tokens;
  last_used_[static_cast<size_t>(hit.source)] = ++clock_;
  // A cached sequence whose every cell the newcomer now shares adds nothing: free its id.
  if (tree_.exclusive_cells(hit.source) == 0) {
    tree_.release(hit.source);
    engine_.release_sequence(hit.source);
    state_[static_cast<size_t>(hit.source)] = State::free;
  }
  return hit.tokens;
}

int KvManager::take_over(int id, const PrefixLookup& hit, std::span<const Token> prompt) {
  const TokenList held = tree_.tokens(id);
  if (static_cast<int>(held.size()) > hit.tokens) {
    // What the new prompt does not continue may be another's: keep it in host memory.
    if (host_.enabled()) save_to_host(id, held);
    kv_evicted_.remember(held);
    engine_.keep_sequence_prefix(id, hit.tokens);
    tree_.release(id);
    tree_.append(id, prompt.first(static_cast<size_t>(hit.tokens)));
  }
  return hit.tokens;
}

// The entry is found again by the prompt: making room since the lookup may have saved a longer
// state that replaced it.
int KvManager::restore_from_host(int id, const PrefixLookup& hit, std::span<const Token> prompt) {
  const HostPrefixCache::Match stored = host_.match(
      prompt.first(static_cast<size_t>(hit.tokens)),
      [&](const HostPrefixCache::Entry& entry, int n) { return host_usable(entry, n); });
  if (stored.tokens < hit.tokens) return 0;
  const auto started = std::chrono::steady_clock::now();
  if (!engine_.restore_sequence(id, stored.entry->state, hit.tokens)) return 0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  tree_.append(id, prompt.first(static_cast<size_t>(hit.tokens)));
  metrics_.count_host_restore(hit.tokens, stored.entry->state.size(), seconds);
  host_.touch(stored.entry->id);
  return hit.tokens;
}

void KvManager::record(int id, std::span<const Token> tokens) { tree_.append(id, tokens); }

void KvManager::release(int id) {
  tree_.release(id);
  engine_.release_sequence(id);
  state_[static_cast<size_t>(id)] = State::free;
}

bool KvManager::swap_out(int id) {
  const TokenList tokens = tree_.tokens(id);
  const bool saved =
      options_.enabled && host_.enabled() && !tokens.empty() && save_to_host(id, tokens);
  release(id);
  return saved;
}

void KvManager::retire(int id) {
  if (!options_.enabled || tree_.length(id) == 0) {
    release(id);
    return;
  }
  state_[static_cast<size_t>(id)] = State::cached;
  last_used_[static_cast<size_t>(id)] = ++clock_;
  if (!per_sequence_) end_oldest_trials();
}

// Frees the oldest cached sequences nobody has reused beyond options_.trial_sequences.
void KvManager::end_oldest_trials() {
  for (;;) {
    int trials = 0;
    int oldest = -1;
    for (size_t id = 0; id < state_.size(); ++id) {
      if (state_[id] != State::cached || reused_[id]) continue;
      ++trials;
      if (oldest < 0 || last_used_[id] < last_used_[static_cast<size_t>(oldest)]) {
        oldest = static_cast<int>(id);
      }
    }
    if (trials <= options_.trial_sequences) return;
    evict(oldest);
  }
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
  evict(oldest);
  return true;
}

void KvManager::evict(int id) {
  const TokenList tokens = tree_.tokens(id);
  kv_evicted_.remember(tokens);
  if (host_.enabled() && !tokens.empty()) save_to_host(id, tokens);
  release(id);
  metrics_.count_prefix_eviction();
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

int KvManager::attended_cells() const {
  if (!per_sequence_) return used_cells();
  return (used_cells() - cached_cells()) / std::max(1, running_sequences());
}

int KvManager::running_sequences() const {
  return static_cast<int>(std::count(state_.begin(), state_.end(), State::running));
}

}  // namespace brisk
