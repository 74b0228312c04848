#pragma once

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
    Sequence* sequence = nullptr;
    int tokens = 0;  // 1 for a decode
    bool decode = false;
    int logits_index = -1;  // where its logits sit in the batch; set by fill_batch
  };

  void clear();
  void add_decode(Sequence& sequence);
  void add_prefill(Sequence& sequence, int tokens);

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
