#include "sched/priced_model_runner.h"

#include <algorithm>
#include <cstring>

namespace brisk {

namespace {

// The token the logits pick: ordinary (not the end of generation), the same every step.
constexpr int kPickedToken = 1;

}  // namespace

PricedModelRunner::PricedModelRunner(int cells, int sequence_ids, bool buffer_per_sequence,
                                     StepCosts price, VirtualClock& clock)
    : cells_(std::max(1, cells)),
      sequence_ids_(std::max(1, sequence_ids)),
      buffer_per_sequence_(buffer_per_sequence),
      price_(std::move(price)),
      clock_(clock),
      logits_(kVocabulary, 0.0f),
      sequences_(static_cast<size_t>(sequence_ids_)) {
  logits_[kPickedToken] = 10.0f;
}

int PricedModelRunner::sequence_context_size() const {
  return buffer_per_sequence_ ? cells_ / sequence_ids_ : cells_;
}

int PricedModelRunner::add_to_batch(Token, int position, int sequence, bool) {
  batch_.push_back({position, sequence});
  return static_cast<int>(batch_.size()) - 1;
}

std::vector<int>& PricedModelRunner::cells_of(int sequence) {
  return sequences_.at(static_cast<size_t>(sequence));
}

int PricedModelRunner::new_cell() {
  ++cells_in_use_;
  if (!free_cells_.empty()) {
    const int cell = free_cells_.back();
    free_cells_.pop_back();
    owners_[static_cast<size_t>(cell)] = 1;
    return cell;
  }
  owners_.push_back(1);
  return static_cast<int>(owners_.size()) - 1;
}

void PricedModelRunner::drop_cell(int cell) {
  if (--owners_[static_cast<size_t>(cell)] > 0) return;
  --cells_in_use_;
  free_cells_.push_back(cell);
}

// Decodes are the sequences with one token in the batch; the rest are prompt chunks. Each row
// attends over every cell in use in one buffer (as StepScheduler prices it: KvManager's
// attended_cells), over its own sequence's with a buffer per sequence.
PricedStep PricedModelRunner::shape_of_batch() const {
  PricedStep shape;
  std::vector<int> per_sequence(sequences_.size(), 0);
  for (const Entry& entry : batch_) ++per_sequence[static_cast<size_t>(entry.sequence)];
  long own_cells = 0;
  int sequences = 0;
  for (size_t s = 0; s < per_sequence.size(); ++s) {
    if (per_sequence[s] == 0) continue;
    ++sequences;
    own_cells += static_cast<long>(sequences_[s].size());
    if (per_sequence[s] == 1) {
      ++shape.decodes;
    } else {
      shape.prompt_tokens += per_sequence[s];
    }
  }
  shape.attended_cells = buffer_per_sequence_
                             ? static_cast<int>(own_cells / std::max(1, sequences))
                             : cells_in_use_ + cells_outside_;
  return shape;
}

DecodeStatus PricedModelRunner::decode() {
  if (buffer_per_sequence_) {
    std::vector<int> wanted(sequences_.size(), 0);
    for (const Entry& entry : batch_) {
      const size_t s = static_cast<size_t>(entry.sequence);
      if (static_cast<int>(sequences_[s].size()) + ++wanted[s] > sequence_context_size()) {
        return DecodeStatus::no_kv_space;
      }
    }
  } else if (cells_in_use_ + batch_size() > cells_) {
    return DecodeStatus::no_kv_space;  // nothing applied, as llama_decode
  }
  PricedStep shape = shape_of_batch();
  price_.set_attended_cells(shape.attended_cells);
  shape.ms = price_.step_ms(shape.decodes, shape.prompt_tokens);
  for (const Entry& entry : batch_) {
    std::vector<int>& cells = cells_of(entry.sequence);
    if (entry.position < static_cast<int>(cells.size())) {
      // A position written again (a prompt recomputed in place): its cell is replaced.
      drop_cell(cells[static_cast<size_t>(entry.position)]);
      cells[static_cast<size_t>(entry.position)] = new_cell();
    } else {
      cells.push_back(new_cell());
    }
  }
  clock_.advance_ms(shape.ms);
  if (recording_) steps_.push_back(shape);
  return DecodeStatus::ok;
}

void PricedModelRunner::release_sequence(int sequence) { keep_sequence_prefix(sequence, 0); }

void PricedModelRunner::copy_sequence_prefix(int source, int destination, int tokens) {
  const std::vector<int> from = cells_of(source);
  std::vector<int>& to = cells_of(destination);
  const int count = std::min(tokens, static_cast<int>(from.size()));
  for (int i = 0; i < count; ++i) {
    if (buffer_per_sequence_) {
      to.push_back(new_cell());
    } else {
      const int cell = from[static_cast<size_t>(i)];
      ++owners_[static_cast<size_t>(cell)];
      to.push_back(cell);
    }
  }
}

void PricedModelRunner::keep_sequence_prefix(int sequence, int tokens) {
  std::vector<int>& cells = cells_of(sequence);
  while (static_cast<int>(cells.size()) > std::max(0, tokens)) {
    drop_cell(cells.back());
    cells.pop_back();
  }
}

// The state is the sequence's length: restoring it takes that many new cells.
std::vector<uint8_t> PricedModelRunner::save_sequence(int sequence) {
  const int length = static_cast<int>(cells_of(sequence).size());
  if (length == 0) return {};
  std::vector<uint8_t> state(sizeof(length));
  std::memcpy(state.data(), &length, sizeof(length));
  return state;
}

bool PricedModelRunner::restore_sequence(int sequence, std::span<const uint8_t> state,
                                         int tokens) {
  int saved = 0;
  if (state.size() != sizeof(saved)) return false;
  std::memcpy(&saved, state.data(), sizeof(saved));
  std::vector<int>& cells = cells_of(sequence);
  const int count = std::min(tokens, saved);
  const bool room = buffer_per_sequence_ ? count <= sequence_context_size()
                                         : cells_in_use_ + count <= cells_;
  if (!cells.empty() || !room) return false;
  for (int i = 0; i < count; ++i) cells.push_back(new_cell());
  return true;
}

}  // namespace brisk
