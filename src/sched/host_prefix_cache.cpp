#include "sched/host_prefix_cache.h"

#include <algorithm>

namespace brisk {
namespace {

int common_prefix(std::span<const Token> a, std::span<const Token> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int>(i);
}

bool starts_with(std::span<const Token> tokens, std::span<const Token> prefix) {
  return prefix.size() <= tokens.size() &&
         common_prefix(tokens, prefix) == static_cast<int>(prefix.size());
}

}  // namespace

HostPrefixCache::Match HostPrefixCache::match(
    std::span<const Token> tokens, const std::function<bool(const Entry&, int)>& usable) const {
  Match best;
  for (const Entry& entry : entries_) {
    const int shared = common_prefix(tokens, entry.tokens);
    if (shared > best.tokens && usable(entry, shared)) best = {&entry, shared};
  }
  return best;
}

void HostPrefixCache::touch(uint64_t id) {
  const auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
  if (it != entries_.end()) entries_.splice(entries_.begin(), entries_, it);
}

std::vector<TokenList> HostPrefixCache::insert(TokenList tokens, std::vector<uint8_t> state,
                                               int window_start, bool* stored) {
  if (stored) *stored = false;
  std::vector<TokenList> evicted;
  if (!enabled() || state.empty() || state.size() > capacity_bytes_) return evicted;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (starts_with(it->tokens, tokens)) {  // already held, and more
      entries_.splice(entries_.begin(), entries_, it);
      return evicted;
    }
    if (starts_with(tokens, it->tokens)) {  // the new state holds all of it
      bytes_ -= it->state.size();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  bytes_ += state.size();
  entries_.push_front({std::move(tokens), std::move(state), window_start, next_id_++});
  if (stored) *stored = true;
  while (bytes_ > capacity_bytes_) {
    Entry& oldest = entries_.back();
    bytes_ -= oldest.state.size();
    evicted.push_back(std::move(oldest.tokens));
    entries_.pop_back();
  }
  return evicted;
}

}  // namespace brisk
