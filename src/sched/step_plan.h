#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model_runner.h"
#include "sched/sequence.h"

namespace brisk {

// What one engine step computes: which sequences decode their next token and which put in a
// prompt chunk of how many tokens. The scheduler plans it without moving any sequence forward;
// the batch is filled from it, and only once the decode succeeded is it committed to the
// sequences. A plan the decode refused (no KV room) is simply dropped and planned again.
class StepPlan {
 public:
  struct Entry {
    uint64_t order = 0;  // the sequence's admission order: the planner names sequences by it
    Sequence* sequence = nullptr;  // null until bound, for a sequence the plan admits
    int tokens = 0;  // 1 for a decode
    bool decode = false;
    int logits_index = -1;  // where its logits sit in the batch; set by fill_batch
  };

  void clear();
  void add_decode(Sequence& sequence);
  void add_prefill(Sequence& sequence, int tokens);
  // The same for the sequence of admission order `order`, bound to it later (bind()).
  void add_decode(uint64_t order, Sequence* sequence);
  void add_prefill(uint64_t order, Sequence* sequence, int tokens);
  // Gives every entry its sequence, found by admission order.
  void bind(const std::function<Sequence*(uint64_t order)>& find);

  bool empty() const { return entries_.empty(); }
  int tokens() const { return tokens_; }
  int decode_tokens() const { return decode_tokens_; }
  const std::vector<Entry>& entries() const { return entries_; }

  // Lists the entries by sequence id. With a KV buffer per sequence llama.cpp cuts a batch into
  // ubatches of consecutive sequence ids in increasing order (llama_batch_allocr::split_equal,
  // sequential), each computed on its own: in admission order, ids 8..15 then 0..7 took two
  // passes over the weights a step instead of one.
  void order_by_sequence_id();
  // Puts the planned tokens into the engine's (cleared) batch.
  void fill_batch(ModelRunner& engine);
  // After a successful decode: the sequences hold the planned tokens in their cells.
  void commit();

 private:
  std::vector<Entry> entries_;
  int tokens_ = 0;
  int decode_tokens_ = 0;
};

}  // namespace brisk
