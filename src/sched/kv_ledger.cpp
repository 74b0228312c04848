#include "sched/kv_ledger.h"

#include <algorithm>
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

KvOp release_op(int id) {
  KvOp op;
  op.kind = KvOp::Kind::release;
  op.id = id;
  return op;
}

KvOp save_op(int id, TokenList tokens) {
  KvOp op;
  op.kind = KvOp::Kind::save_to_host;
  op.id = id;
  op.tokens_held = std::move(tokens);
  return op;
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

KvLedger::KvLedger(int sequence_ids, int running_limit, bool per_sequence,
                   PrefixCacheOptions options, KvWindow window)
    : per_sequence_(per_sequence),
      takes_over_(per_sequence || sequence_ids <= running_limit),
      options_([&] {
        PrefixCacheOptions effective = options;
        effective.enabled = options.enabled && sequence_ids <= PrefixTree::kMaxSequences;
        return effective;
      }()),
      window_(std::move(window)),
      state_(static_cast<size_t>(std::min(sequence_ids, PrefixTree::kMaxSequences)), State::free),
      last_used_(state_.size(), 0),
      reused_(state_.size(), false) {}

KvLedger::Match KvLedger::match(std::span<const Token> query, int min_tokens) const {
  Match result;
  const PrefixTree::Match match = tree_.match(query);
  result.longest = match.tokens;
  if (match.tokens < min_tokens) return result;
  for (size_t id = 0; id < state_.size(); ++id) {
    if (!match.owners.test(id) || !window_allows(static_cast<int>(id), match.tokens)) continue;
    // A cached owner that can be taken over is, rather than copied: the first found.
    if (result.source < 0 || (takes_over_ && state_[id] == State::cached &&
                              state_[static_cast<size_t>(result.source)] != State::cached)) {
      result.tokens = match.tokens;
      result.source = static_cast<int>(id);
    }
  }
  return result;
}

// On a sliding-window model a new sequence reusing `tokens` cells attends, from position
// `tokens` on, to the window before it: the source must still hold those cells (llama.cpp
// reuses the masked cells of a sequence that owns them alone when it needs room).
bool KvLedger::window_allows(int source, int tokens) const {
  if (window_.tokens <= 0 || !window_.start) return true;
  return window_.start(source) <= std::max(0, tokens - window_.tokens + 1);
}

int KvLedger::acquire(const PrefixLookup& hit, KvOps& ops) {
  if (takes_over_ && hit.tokens > 0 && !hit.from_host && hit.source >= 0 &&
      state_[static_cast<size_t>(hit.source)] == State::cached) {
    return start_running(hit.source);
  }
  if (per_sequence_) {
    const int id = compact_id();
    if (id < 0) return -1;
    if (state_[static_cast<size_t>(id)] == State::cached) evict(id, ops);
    return start_running(id);
  }
  for (;;) {
    const auto free = std::find(state_.begin(), state_.end(), State::free);
    if (free != state_.end()) return start_running(static_cast<int>(free - state_.begin()));
    if (!evict_oldest(hit.source, ops)) return -1;
  }
}

int KvLedger::start_running(int id) {
  state_[static_cast<size_t>(id)] = State::running;
  reused_[static_cast<size_t>(id)] = false;
  return id;
}

// llama.cpp computes each run of consecutive running ids in a pass of its own (StepPlan): the
// id that leaves the fewest runs (one joining two runs, then one extending a run), a free one
// before a cached one, the least recently used of the cached.
int KvLedger::compact_id() const {
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

int KvLedger::attach(int id, const PrefixLookup& hit, std::span<const Token> prompt, KvOps& ops) {
  if (hit.tokens <= 0) return 0;
  const std::span<const Token> reused = prompt.first(static_cast<size_t>(hit.tokens));
  if (hit.from_host) {
    KvOp op;
    op.kind = KvOp::Kind::restore_from_host;
    op.id = id;
    op.tokens_held.assign(reused.begin(), reused.end());
    ops.push_back(std::move(op));
    tree_.append(id, reused);
    return hit.tokens;
  }
  if (id == hit.source) return take_over(id, hit, prompt, ops);
  KvOp copy;
  copy.kind = KvOp::Kind::copy_prefix;
  copy.id = id;
  copy.source = hit.source;
  copy.tokens = hit.tokens;
  ops.push_back(std::move(copy));
  tree_.share(id, hit.source, hit.tokens);
  if (!hit.within_request) reused_[static_cast<size_t>(hit.source)] = true;
  if (state_[static_cast<size_t>(hit.source)] != State::cached) return hit.tokens;
  last_used_[static_cast<size_t>(hit.source)] = ++clock_;
  // A cached sequence whose every cell the newcomer now shares adds nothing: free its id.
  if (tree_.exclusive_cells(hit.source) == 0) release(hit.source, ops);
  return hit.tokens;
}

int KvLedger::take_over(int id, const PrefixLookup& hit, std::span<const Token> prompt,
                        KvOps& ops) {
  TokenList held = tree_.tokens(id);
  if (static_cast<int>(held.size()) > hit.tokens) {
    // What the new prompt does not continue may be another's: keep it in host memory.
    if (host_tier_enabled()) ops.push_back(save_op(id, held));
    KvOp keep;
    keep.kind = KvOp::Kind::keep_prefix;
    keep.id = id;
    keep.tokens = hit.tokens;
    keep.tokens_held = std::move(held);
    ops.push_back(std::move(keep));
    tree_.release(id);
    tree_.append(id, prompt.first(static_cast<size_t>(hit.tokens)));
  }
  return hit.tokens;
}

void KvLedger::release(int id, KvOps& ops) {
  tree_.release(id);
  ops.push_back(release_op(id));
  state_[static_cast<size_t>(id)] = State::free;
}

void KvLedger::swap_out(int id, KvOps& ops) {
  TokenList tokens = tree_.tokens(id);
  if (host_tier_enabled() && !tokens.empty()) ops.push_back(save_op(id, std::move(tokens)));
  release(id, ops);
}

void KvLedger::retire(int id, KvOps& ops) {
  if (!options_.enabled || tree_.length(id) == 0) {
    release(id, ops);
    return;
  }
  state_[static_cast<size_t>(id)] = State::cached;
  last_used_[static_cast<size_t>(id)] = ++clock_;
  if (!per_sequence_) end_oldest_trials(ops);
}

// Frees the oldest cached sequences nobody has reused beyond options_.trial_sequences.
void KvLedger::end_oldest_trials(KvOps& ops) {
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
    evict(oldest, ops);
  }
}

bool KvLedger::evict_oldest(int keep, KvOps& ops) {
  int oldest = -1;
  for (size_t id = 0; id < state_.size(); ++id) {
    if (state_[id] != State::cached || static_cast<int>(id) == keep) continue;
    if (oldest < 0 || last_used_[id] < last_used_[static_cast<size_t>(oldest)]) {
      oldest = static_cast<int>(id);
    }
  }
  if (oldest < 0) return false;
  evict(oldest, ops);
  return true;
}

void KvLedger::evict(int id, KvOps& ops) {
  TokenList tokens = tree_.tokens(id);
  if (host_tier_enabled() && !tokens.empty()) ops.push_back(save_op(id, tokens));
  tree_.release(id);
  KvOp release = release_op(id);
  release.eviction = true;
  release.tokens_held = std::move(tokens);
  ops.push_back(std::move(release));
  state_[static_cast<size_t>(id)] = State::free;
}

PrefixTree::Owners KvLedger::running_mask() const {
  PrefixTree::Owners mask;
  for (size_t id = 0; id < state_.size(); ++id) mask.set(id, state_[id] == State::running);
  return mask;
}

int KvLedger::cached_cells() const { return tree_.cells_outside(running_mask()); }

int KvLedger::evictable_cells(int keep) const {
  PrefixTree::Owners mask = running_mask();
  if (keep >= 0) mask.set(static_cast<size_t>(keep));
  return tree_.cells_outside(mask);
}

int KvLedger::cached_sequences() const {
  return static_cast<int>(std::count(state_.begin(), state_.end(), State::cached));
}

int KvLedger::attended_cells() const {
  if (!per_sequence_) return used_cells();
  return (used_cells() - cached_cells()) / std::max(1, running_sequences());
}

PrefixLookup lookup_in_ledger(const KvLedger& ledger, std::span<const Token> tokens,
                              int min_tokens) {
  PrefixLookup result;
  if (!ledger.cache_enabled()) {
    result.miss = PrefixMiss::disabled;
    return result;
  }
  if (tokens.size() <= 1) {
    result.miss = PrefixMiss::no_match;
    return result;
  }
  const KvLedger::Match match = ledger.match(tokens.first(tokens.size() - 1), min_tokens);
  result.tokens = match.tokens;
  result.source = match.source;
  result.longest_in_kv = match.longest;
  if (result.tokens > 0) return result;
  result.miss = match.longest >= min_tokens ? PrefixMiss::window_expired
                : match.longest > 0         ? PrefixMiss::below_minimum
                                            : PrefixMiss::no_match;
  return result;
}

int KvLedger::running_sequences() const {
  return static_cast<int>(std::count(state_.begin(), state_.end(), State::running));
}

}  // namespace brisk
