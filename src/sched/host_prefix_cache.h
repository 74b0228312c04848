#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <vector>

#include "engine/token.h"

namespace brisk {

// The prefix cache's host-memory tier (--cache-ram): the KV state of sequences the KV cache
// evicted, kept in host memory, least recently used first out, within a byte budget. A prompt
// that starts with an entry's tokens restores the entry into a free sequence instead of
// computing them again: a chat's earlier turns outlive their KV cells, however many other
// requests ran in between. Engine thread only (KvManager owns it).
class HostPrefixCache {
 public:
  struct Entry {
    TokenList tokens;            // the positions the state holds, from 0
    std::vector<uint8_t> state;  // ModelRunner::save_sequence's bytes
    int window_start = 0;        // the first position its sliding-window cells hold
    uint64_t id = 0;
  };
  struct Match {
    const Entry* entry = nullptr;
    int tokens = 0;  // leading tokens of the query the entry holds
  };

  explicit HostPrefixCache(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  bool enabled() const { return capacity_bytes_ > 0; }
  // The entry sharing the longest prefix with `tokens` among those `usable` accepts (given the
  // entry and the match length).
  Match match(std::span<const Token> tokens,
              const std::function<bool(const Entry&, int)>& usable) const;
  // Marks the entry most recently used.
  void touch(uint64_t id);
  // Keeps a sequence's state. An entry whose tokens the new one extends is replaced; one that
  // already extends the new tokens makes it redundant (only touched). Evicts the least recently
  // used entries until the budget holds; returns the token lists of those it evicted (and
  // false as `stored` when the state alone is over the budget).
  std::vector<TokenList> insert(TokenList tokens, std::vector<uint8_t> state, int window_start,
                                bool* stored = nullptr);

  size_t bytes() const { return bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }
  size_t entries() const { return entries_.size(); }

 private:
  size_t capacity_bytes_;
  size_t bytes_ = 0;
  uint64_t next_id_ = 1;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace brisk
