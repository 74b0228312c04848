#pragma once

#include <bitset>
#include <memory>
#include <span>
#include <vector>

#include "engine/token.h"

namespace brisk {

// What every KV sequence holds, as a radix tree over token ids. A node is a run of KV cells:
// tokens at consecutive positions, computed once and owned by one or more sequences (in
// llama.cpp's unified cache a cell carries the set of sequence ids that share it). A
// sequence's cells are the path from the root to its leaf, so a shared system prompt is one
// node owned by every sequence that reuses it, and the cells in use are the tree's tokens.
//
// Two sequences that computed the same tokens independently own different cells, so sibling
// nodes may start with the same token; a lookup takes the longest match among them.
class PrefixTree {
 public:
  static constexpr int kMaxSequences = 256;  // llama.cpp's LLAMA_MAX_SEQ
  using Owners = std::bitset<kMaxSequences>;

  struct Match {
    int tokens = 0;  // length of the longest prefix some sequence holds
    Owners owners;   // the sequences whose cells hold all of it
  };

  PrefixTree();
  ~PrefixTree();
  // A copy holds the same cells in nodes of its own (a planner's scratch ledger).
  PrefixTree(const PrefixTree& other);
  PrefixTree& operator=(const PrefixTree& other);
  PrefixTree(PrefixTree&&) noexcept;
  PrefixTree& operator=(PrefixTree&&) noexcept;

  Match match(std::span<const Token> tokens) const;
  // `sequence` (holding nothing) comes to own the first `tokens` cells of `source`'s.
  void share(int sequence, int source, int tokens);
  // `sequence` computed `tokens` at its next positions.
  void append(int sequence, std::span<const Token> tokens);
  // `sequence` gives up its cells; those nobody else owns are freed.
  void release(int sequence);

  int length(int sequence) const;
  // Cells owned by at least one sequence.
  int cells() const { return cells_; }
  // Cells that releasing `sequence` would free.
  int exclusive_cells(int sequence) const;
  // Cells owned by none of `sequences`: what releasing every other sequence would free.
  int cells_outside(const Owners& sequences) const;
  // The tokens `sequence` holds, in position order.
  TokenList tokens(int sequence) const;
  int nodes() const;

 private:
  struct Node;
  Node* split(Node* node, int offset);
  // The nodes from the root's child down to the sequence's leaf.
  std::vector<Node*> path(int sequence) const;

  std::unique_ptr<Node> root_;
  std::vector<Node*> leaf_;  // per sequence id; root_ when it holds nothing
  int cells_ = 0;
};

}  // namespace brisk
