#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/model_runner.h"
#include "sched/step_costs.h"

namespace brisk {

// A clock that moves only when a step says so: the simulation's time (sched/serve_simulation.h).
class VirtualClock {
 public:
  TimePoint now() const { return now_; }
  void advance_ms(double ms) {
    now_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  }

 private:
  // Far from the epoch, so "arrival minus a little" stays valid.
  TimePoint now_{std::chrono::hours(1)};
};

// What one step the runner ran looked like: the decisions of the scheduler it ran for.
struct PricedStep {
  int decodes = 0;        // sequences with one token each
  int prompt_tokens = 0;  // tokens of prompt chunks
  int attended_cells = 0;
  double ms = 0;
  bool operator==(const PricedStep&) const = default;
};

// A ModelRunner with no model: a ledger of KV cells (shared by several sequences in one buffer,
// as llama.cpp's unified cache; copied with a buffer per sequence) and steps that take the time
// `price` says a step of their shape costs at the cells its rows attend over, on a virtual clock.
// The scheduler runs on it exactly as on the engine, so brisk plan predicts with brisk serve's
// own scheduler (sched/serve_simulation.h). Its logits always pick the same ordinary token:
// requests end by their max_tokens.
class PricedModelRunner final : public ModelRunner {
 public:
  // `cells` KV cells in one buffer, or, with `buffer_per_sequence`, cells / sequence_ids each.
  PricedModelRunner(int cells, int sequence_ids, bool buffer_per_sequence, StepCosts price,
                    VirtualClock& clock);

  int context_size() const override { return cells_; }
  int sequence_context_size() const override;
  int sequence_ids() const override { return sequence_ids_; }
  int sliding_window_tokens() const override { return 0; }
  int vocabulary_size() const override { return kVocabulary; }
  bool is_end_of_generation(Token) const override { return false; }
  std::string token_piece(Token) const override { return "x"; }

  void clear_batch() override { batch_.clear(); }
  int batch_size() const override { return static_cast<int>(batch_.size()); }
  int add_to_batch(Token token, int position, int sequence, bool want_logits) override;
  DecodeStatus decode() override;
  void synchronize() override {}
  const float* logits(int) override { return logits_.data(); }
  void release_sequence(int sequence) override;
  void copy_sequence_prefix(int source, int destination, int tokens) override;
  void keep_sequence_prefix(int sequence, int tokens) override;
  int sequence_window_start(int) const override { return 0; }
  std::vector<uint8_t> save_sequence(int sequence) override;
  bool restore_sequence(int sequence, std::span<const uint8_t> state, int tokens) override;

  // Every step decoded so far, in order (when recording).
  void record_steps(bool on) { recording_ = on; }
  const std::vector<PricedStep>& steps() const { return steps_; }
  int cells_in_use() const { return cells_in_use_; }
  // Cells held by sequences that ran before the simulation began (admission's forecast starts
  // from a live server's state): in one buffer every row attends over them too. Outside the
  // ledger: they take no room the scheduler would plan with.
  void set_cells_outside(int cells) { cells_outside_ = std::max(0, cells); }

  static constexpr int kVocabulary = 4;

 private:
  struct Entry {
    int position;
    int sequence;
  };
  std::vector<int>& cells_of(int sequence);
  int new_cell();
  void drop_cell(int cell);
  PricedStep shape_of_batch() const;

  const int cells_;
  const int sequence_ids_;
  const bool buffer_per_sequence_;
  StepCosts price_;
  VirtualClock& clock_;
  std::vector<Entry> batch_;
  std::vector<float> logits_;
  std::vector<std::vector<int>> sequences_;  // by id: cell ids by position
  std::vector<int> owners_;                  // by cell id: sequences holding it
  std::vector<int> free_cells_;
  int cells_in_use_ = 0;
  int cells_outside_ = 0;
  bool recording_ = false;
  std::vector<PricedStep> steps_;
};

}  // namespace brisk
