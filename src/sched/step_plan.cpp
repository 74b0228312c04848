#include "sched/step_plan.h"

#include <algorithm>

namespace brisk {

void StepPlan::clear() {
  entries_.clear();
  tokens_ = 0;
  decode_tokens_ = 0;
}

void StepPlan::add_decode(Sequence& sequence) { add_decode(sequence.admission_order(), &sequence); }

void StepPlan::add_prefill(Sequence& sequence, int tokens) {
  add_prefill(sequence.admission_order(), &sequence, tokens);
}

void StepPlan::add_decode(uint64_t order, Sequence* sequence) {
  entries_.push_back({order, sequence, 1, true});
  ++tokens_;
  ++decode_tokens_;
}

void StepPlan::add_prefill(uint64_t order, Sequence* sequence, int tokens) {
  entries_.push_back({order, sequence, tokens, false});
  tokens_ += tokens;
}

void StepPlan::bind(const std::function<Sequence*(uint64_t order)>& find) {
  for (Entry& entry : entries_) entry.sequence = find(entry.order);
}

void StepPlan::order_by_sequence_id() {
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.sequence->slot() < b.sequence->slot();
  });
}

void StepPlan::fill_batch(ModelRunner& engine) {
  engine.clear_batch();
  for (Entry& entry : entries_) {
    entry.logits_index = entry.decode ? entry.sequence->put_decode_token(engine)
                                      : entry.sequence->put_prefill_chunk(engine, entry.tokens);
  }
}

void StepPlan::commit() {
  for (const Entry& entry : entries_) {
    if (entry.decode) {
      entry.sequence->commit_decode_token();
    } else {
      entry.sequence->commit_prefill_chunk(entry.tokens);
    }
  }
}

}  // namespace brisk
