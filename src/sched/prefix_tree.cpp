#include "sched/prefix_tree.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>
#include <utility>

namespace brisk {

struct PrefixTree::Node {
  Node* parent = nullptr;
  int start = 0;      // position of tokens[0]
  TokenList tokens;   // one per cell
  Owners owners;      // a child's owners are always a subset of its parent's
  std::vector<std::unique_ptr<Node>> children;

  int end() const { return start + static_cast<int>(tokens.size()); }
};

PrefixTree::PrefixTree() : root_(std::make_unique<Node>()), leaf_(kMaxSequences, root_.get()) {}

PrefixTree::~PrefixTree() = default;
PrefixTree::PrefixTree(PrefixTree&&) noexcept = default;
PrefixTree& PrefixTree::operator=(PrefixTree&&) noexcept = default;

PrefixTree::PrefixTree(const PrefixTree& other)
    : root_(std::make_unique<Node>()), leaf_(kMaxSequences, nullptr), cells_(other.cells_) {
  std::unordered_map<const Node*, Node*> copies{{other.root_.get(), root_.get()}};
  std::vector<std::pair<const Node*, Node*>> stack{{other.root_.get(), root_.get()}};
  while (!stack.empty()) {
    const auto [from, to] = stack.back();
    stack.pop_back();
    for (const auto& child : from->children) {
      auto copy = std::make_unique<Node>();
      copy->parent = to;
      copy->start = child->start;
      copy->tokens = child->tokens;
      copy->owners = child->owners;
      copies.emplace(child.get(), copy.get());
      stack.emplace_back(child.get(), copy.get());
      to->children.push_back(std::move(copy));
    }
  }
  for (size_t id = 0; id < leaf_.size(); ++id) leaf_[id] = copies.at(other.leaf_[id]);
}

PrefixTree& PrefixTree::operator=(const PrefixTree& other) {
  if (this != &other) *this = PrefixTree(other);
  return *this;
}

PrefixTree::Match PrefixTree::match(std::span<const Token> tokens) const {
  Match best;
  // Depth-first over the children that continue the prompt; siblings may repeat a token.
  struct Frame {
    const Node* node;
  };
  std::vector<Frame> stack{{root_.get()}};
  while (!stack.empty()) {
    const Node* node = stack.back().node;
    stack.pop_back();
    for (const auto& child : node->children) {
      const size_t from = static_cast<size_t>(child->start);
      if (from >= tokens.size() || child->tokens.front() != tokens[from]) continue;
      const size_t limit = std::min(child->tokens.size(), tokens.size() - from);
      size_t common = 0;
      while (common < limit && child->tokens[common] == tokens[from + common]) ++common;
      const int matched = child->start + static_cast<int>(common);
      if (matched > best.tokens) {
        best.tokens = matched;
        best.owners = child->owners;
      }
      if (common == child->tokens.size()) stack.push_back({child.get()});
    }
  }
  return best;
}

std::vector<PrefixTree::Node*> PrefixTree::path(int sequence) const {
  std::vector<Node*> nodes;
  for (Node* node = leaf_[static_cast<size_t>(sequence)]; node != root_.get(); node = node->parent) {
    nodes.push_back(node);
  }
  std::reverse(nodes.begin(), nodes.end());
  return nodes;
}

// Cuts `node` after `offset` tokens; returns the upper part, which takes its place.
PrefixTree::Node* PrefixTree::split(Node* node, int offset) {
  auto upper = std::make_unique<Node>();
  upper->parent = node->parent;
  upper->start = node->start;
  upper->owners = node->owners;
  upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + offset);
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + offset);
  node->start += offset;
  auto& siblings = node->parent->children;
  auto at = std::find_if(siblings.begin(), siblings.end(),
                         [&](const auto& child) { return child.get() == node; });
  Node* upper_raw = upper.get();
  upper->children.push_back(std::move(*at));
  node->parent = upper_raw;
  *at = std::move(upper);
  return upper_raw;
}

void PrefixTree::share(int sequence, int source, int tokens) {
  assert(leaf_[static_cast<size_t>(sequence)] == root_.get());
  if (tokens <= 0) return;
  Node* leaf = root_.get();
  for (Node* node : path(source)) {
    if (node->start >= tokens) break;
    if (node->end() > tokens) node = split(node, tokens - node->start);
    node->owners.set(static_cast<size_t>(sequence));
    leaf = node;
  }
  leaf_[static_cast<size_t>(sequence)] = leaf;
}

void PrefixTree::append(int sequence, std::span<const Token> tokens) {
  if (tokens.empty()) return;
  Node*& leaf = leaf_[static_cast<size_t>(sequence)];
  cells_ += static_cast<int>(tokens.size());
  // A leaf owned by this sequence alone has no children (they would be owned by another), so
  // it grows in place.
  if (leaf != root_.get() && leaf->owners.count() == 1) {
    leaf->tokens.insert(leaf->tokens.end(), tokens.begin(), tokens.end());
    return;
  }
  auto child = std::make_unique<Node>();
  child->parent = leaf;
  child->start = leaf == root_.get() ? 0 : leaf->end();
  child->tokens.assign(tokens.begin(), tokens.end());
  child->owners.set(static_cast<size_t>(sequence));
  leaf->children.push_back(std::move(child));
  leaf = leaf->children.back().get();
}

void PrefixTree::release(int sequence) {
  Node* node = leaf_[static_cast<size_t>(sequence)];
  leaf_[static_cast<size_t>(sequence)] = root_.get();
  while (node != root_.get()) {
    Node* parent = node->parent;
    node->owners.reset(static_cast<size_t>(sequence));
    if (node->owners.none()) {
      cells_ -= static_cast<int>(node->tokens.size());
      std::erase_if(parent->children, [&](const auto& child) { return child.get() == node; });
    }
    node = parent;
  }
}

int PrefixTree::length(int sequence) const {
  const Node* leaf = leaf_[static_cast<size_t>(sequence)];
  return leaf == root_.get() ? 0 : leaf->end();
}

int PrefixTree::exclusive_cells(int sequence) const {
  int cells = 0;
  for (const Node* node = leaf_[static_cast<size_t>(sequence)];
       node != root_.get() && node->owners.count() == 1; node = node->parent) {
    cells += static_cast<int>(node->tokens.size());
  }
  return cells;
}

int PrefixTree::cells_outside(const Owners& sequences) const {
  int cells = 0;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& child : node->children) {
      // Owners shrink downwards: below a node none of `sequences` owns, none owns anything.
      if ((child->owners & sequences).none()) {
        std::vector<const Node*> below{child.get()};
        while (!below.empty()) {
          const Node* n = below.back();
          below.pop_back();
          cells += static_cast<int>(n->tokens.size());
          for (const auto& c : n->children) below.push_back(c.get());
        }
      } else {
        stack.push_back(child.get());
      }
    }
  }
  return cells;
}

TokenList PrefixTree::tokens(int sequence) const {
  TokenList out;
  for (const Node* node : path(sequence)) {
    out.insert(out.end(), node->tokens.begin(), node->tokens.end());
  }
  return out;
}

int PrefixTree::nodes() const {
  int count = 0;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& child : node->children) {
      ++count;
      stack.push_back(child.get());
    }
  }
  return count;
}

}  // namespace brisk
