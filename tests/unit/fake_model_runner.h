#pragma once

// A ModelRunner without a model, for the scheduler's tests. Its KV cache stores each sequence's
// tokens by position and checks that every token lands at the next position of its sequence.
// Cells are shared between sequences as in llama.cpp's unified cache (copy_sequence_prefix
// adds an owner), and counted once.
// The logits of a token are a function of its sequence's whole history, so a token the
// scheduler lost, repeated or misplaced changes everything generated after it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "fake_clock.h"

namespace brisk::testing {

class FakeModelRunner final : public ModelRunner {
 public:
  // `context` cells are reported; decode finds room only for `usable_cells` (default: all),
  // which plays llama.cpp answering "no KV slot" when the scheduler's count said there was one.
  explicit FakeModelRunner(int context, int usable_cells = -1, int vocabulary = 97,
                           int sequence_ids = 256)
      : context_(context),
        usable_cells_(usable_cells < 0 ? context : usable_cells),
        vocabulary_(vocabulary),
        sequence_ids_(sequence_ids) {}

  int context_size() const override { return context_; }
  // With `per_sequence`, each id has context/sequence_ids cells of its own (--no-kv-unified):
  // copies take new cells.
  int sequence_context_size() const override {
    return per_sequence ? context_ / sequence_ids_ : context_;
  }
  int vocabulary_size() const override { return vocabulary_; }
  int sequence_ids() const override { return sequence_ids_; }
  int sliding_window_tokens() const override { return sliding_window; }
  bool is_end_of_generation(Token token) const override { return token == end_token; }
  std::string token_piece(Token token) const override { return std::to_string(token) + " "; }

  void clear_batch() override {
    batch_.clear();
    logits_.clear();
  }
  int batch_size() const override { return static_cast<int>(batch_.size()); }
  int add_to_batch(Token token, int position, int sequence, bool want_logits) override {
    batch_.push_back({token, position, sequence, want_logits});
    return static_cast<int>(batch_.size()) - 1;
  }

  DecodeStatus decode() override {
    if (before_decode) before_decode(decodes() + 1);
    std::lock_guard lock(mutex_);
    ++decodes_;
    const int used = static_cast<int>(cell_owners_.size());
    if (used + static_cast<int>(batch_.size()) > usable_cells_) {
      ++no_kv_space_;
      return DecodeStatus::no_kv_space;  // nothing applied, as llama_decode
    }
    std::set<int> sequences;
    // llama.cpp's sequential split (a buffer per sequence) computes each run of consecutive
    // sequence ids, in increasing order, in its own pass.
    int runs = batch_.empty() ? 0 : 1;
    for (size_t i = 1; i < batch_.size(); ++i) {
      const int previous = batch_[i - 1].sequence;
      if (batch_[i].sequence != previous && batch_[i].sequence != previous + 1) ++runs;
    }
    max_sequence_runs_ = std::max(max_sequence_runs_, runs);
    logits_.assign(batch_.size() * static_cast<size_t>(vocabulary_), 0.0f);
    for (size_t i = 0; i < batch_.size(); ++i) {
      const Entry& entry = batch_[i];
      std::vector<Cell>& cells = cache_[entry.sequence];
      if (entry.position != static_cast<int>(cells.size())) ++misplaced_;
      cells.push_back({entry.token, next_cell_});
      ++cell_owners_[next_cell_++];
      sequences.insert(entry.sequence);
      if (!entry.want_logits) continue;
      // One strong logit at a place set by the whole history, the rest spread a little so a
      // seeded draw has choices too.
      uint64_t hash = 1469598103934665603ull;
      for (const Cell& cell : cells) {
        hash = (hash ^ static_cast<uint64_t>(cell.token)) * 1099511628211ull;
      }
      float* row = &logits_[i * static_cast<size_t>(vocabulary_)];
      for (int v = 0; v < vocabulary_; ++v) row[v] = static_cast<float>((hash >> (v % 48)) & 3);
      row[hash % static_cast<uint64_t>(vocabulary_)] = 6.0f;
    }
    max_sequences_in_a_step_ =
        std::max(max_sequences_in_a_step_, static_cast<int>(sequences.size()));
    max_cells_used_ = std::max(max_cells_used_, used + static_cast<int>(batch_.size()));
    max_batch_ = std::max(max_batch_, static_cast<int>(batch_.size()));
    // One buffer: each row attends over every cell in use; a buffer per sequence: its own.
    std::chrono::nanoseconds cell_cost{0};
    if (cell_delay.count() > 0) {
      for (const Entry& entry : batch_) {
        const int attended =
            per_sequence ? static_cast<int>(cache_[entry.sequence].size()) : used;
        cell_cost += cell_delay * attended;
      }
    }
    auto delay = step_delay + token_delay * static_cast<int>(batch_.size()) + cell_cost;
    if (step_price_ms) {
      // Decodes are the sequences with one token in the batch, the rest prompt chunks.
      std::map<int, int> tokens_by_sequence;
      for (const Entry& entry : batch_) ++tokens_by_sequence[entry.sequence];
      int decodes = 0;
      int prompt_tokens = 0;
      for (const auto& [sequence, tokens] : tokens_by_sequence) {
        (tokens == 1 ? decodes : prompt_tokens) += tokens;
      }
      delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double, std::milli>(step_price_ms(decodes, prompt_tokens, used)));
      priced_steps.push_back({decodes, prompt_tokens, used});
    }
    if (clock) {
      clock->advance(delay);
    } else if (delay.count() > 0) {
      std::this_thread::sleep_for(delay);
    }
    return DecodeStatus::ok;
  }
  void synchronize() override {}
  const float* logits(int batch_index) override {
    return &logits_[static_cast<size_t>(batch_index) * static_cast<size_t>(vocabulary_)];
  }
  void release_sequence(int sequence) override {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(sequence);
    if (it == cache_.end()) return;
    for (const Cell& cell : it->second) {
      if (--cell_owners_[cell.id] == 0) cell_owners_.erase(cell.id);
    }
    cache_.erase(it);
  }
  void copy_sequence_prefix(int source, int destination, int tokens) override {
    std::lock_guard lock(mutex_);
    ++copies_;
    std::vector<Cell>& from = cache_[source];
    std::vector<Cell>& to = cache_[destination];
    if (!to.empty() || tokens > static_cast<int>(from.size())) ++bad_copies_;
    for (int i = 0; i < tokens && i < static_cast<int>(from.size()); ++i) {
      Cell cell = from[static_cast<size_t>(i)];
      if (per_sequence) cell.id = next_cell_++;
      to.push_back(cell);
      ++cell_owners_[cell.id];
    }
  }
  void keep_sequence_prefix(int sequence, int tokens) override {
    std::lock_guard lock(mutex_);
    ++trims_;
    std::vector<Cell>& cells = cache_[sequence];
    while (static_cast<int>(cells.size()) > tokens) {
      if (--cell_owners_[cells.back().id] == 0) cell_owners_.erase(cells.back().id);
      cells.pop_back();
    }
  }
  int trims() const {
    std::lock_guard lock(mutex_);
    return trims_;
  }

  // With `drop_window_cells`, a sequence keeps only its last `sliding_window` positions'
  // window cells, as llama.cpp's window cache does when it needs room.
  int sequence_window_start(int sequence) const override {
    std::lock_guard lock(mutex_);
    if (sliding_window <= 0 || !drop_window_cells) return 0;
    auto it = cache_.find(sequence);
    const int length = it == cache_.end() ? 0 : static_cast<int>(it->second.size());
    return std::max(0, length - sliding_window);
  }

  // The saved state is the sequence's tokens; a restore takes new cells for them (as
  // llama.cpp's does), within usable_cells.
  std::vector<uint8_t> save_sequence(int sequence) override {
    std::lock_guard lock(mutex_);
    ++saves_;
    std::vector<uint8_t> state;
    for (const Cell& cell : cache_[sequence]) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(&cell.token);
      state.insert(state.end(), bytes, bytes + sizeof(Token));
    }
    return state;
  }
  bool restore_sequence(int sequence, std::span<const uint8_t> state, int tokens) override {
    std::lock_guard lock(mutex_);
    std::vector<Cell>& cells = cache_[sequence];
    const int saved = static_cast<int>(state.size() / sizeof(Token));
    if (!cells.empty() || tokens > saved ||
        static_cast<int>(cell_owners_.size()) + saved > usable_cells_) {
      ++failed_restores_;
      return false;
    }
    ++restores_;
    for (int i = 0; i < tokens; ++i) {
      Token token;
      std::memcpy(&token, state.data() + static_cast<size_t>(i) * sizeof(Token), sizeof(Token));
      cells.push_back({token, next_cell_});
      ++cell_owners_[next_cell_++];
    }
    return true;
  }
  int saves() const {
    std::lock_guard lock(mutex_);
    return saves_;
  }
  int restores() const {
    std::lock_guard lock(mutex_);
    return restores_;
  }
  int failed_restores() const {
    std::lock_guard lock(mutex_);
    return failed_restores_;
  }

  int decodes() const {
    std::lock_guard lock(mutex_);
    return decodes_;
  }
  // Read after the work is done.
  int no_kv_space_answers() const {
    std::lock_guard lock(mutex_);
    return no_kv_space_;
  }
  int misplaced_tokens() const {
    std::lock_guard lock(mutex_);
    return misplaced_;
  }
  // The most runs of consecutive, increasing sequence ids a batch held.
  int max_sequence_runs() const {
    std::lock_guard lock(mutex_);
    return max_sequence_runs_;
  }
  int max_sequences_in_a_step() const {
    std::lock_guard lock(mutex_);
    return max_sequences_in_a_step_;
  }
  int max_cells_used() const {
    std::lock_guard lock(mutex_);
    return max_cells_used_;
  }
  int max_batch() const {
    std::lock_guard lock(mutex_);
    return max_batch_;
  }
  void reset_max_batch() {
    std::lock_guard lock(mutex_);
    max_batch_ = 0;
  }
  int cells_in_use() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(cell_owners_.size());
  }
  int prefix_copies() const {
    std::lock_guard lock(mutex_);
    return copies_;
  }
  // Copies into a sequence that held cells, or of more cells than the source had.
  int bad_prefix_copies() const {
    std::lock_guard lock(mutex_);
    return bad_copies_;
  }

  Token end_token = -1;  // none: generation stops at max_tokens
  // Runs on the engine thread before decode number n (from 1): lets a test act at an exact step.
  std::function<void(int n)> before_decode;
  std::chrono::microseconds step_delay{0};   // each decode takes this
  std::chrono::microseconds token_delay{0};  // and this per token of its batch
  std::chrono::nanoseconds cell_delay{0};    // and this per token per cell it attends over
  // If set, a step takes what this says of its decodes, prompt tokens and the cells in use
  // before it (instead of the delays above), and is listed in priced_steps.
  std::function<double(int decodes, int prompt_tokens, int cells_in_use)> step_price_ms;
  struct PricedShape {
    int decodes = 0;
    int prompt_tokens = 0;
    int cells_in_use = 0;
  };
  std::vector<PricedShape> priced_steps;
  FakeClock* clock = nullptr;                // if set, the delays move it instead of sleeping
  int sliding_window = 0;
  bool drop_window_cells = false;
  bool per_sequence = false;

 private:
  struct Entry {
    Token token;
    int position;
    int sequence;
    bool want_logits;
  };
  const int context_;
  const int usable_cells_;
  const int vocabulary_;
  const int sequence_ids_;
  struct Cell {
    Token token;
    int id;
  };
  std::vector<Entry> batch_;
  std::vector<float> logits_;
  mutable std::mutex mutex_;
  std::map<int, std::vector<Cell>> cache_;
  std::map<int, int> cell_owners_;  // cell id -> sequences holding it
  int next_cell_ = 0;
  int copies_ = 0;
  int trims_ = 0;
  int bad_copies_ = 0;
  int saves_ = 0;
  int restores_ = 0;
  int failed_restores_ = 0;
  int decodes_ = 0;
  int no_kv_space_ = 0;
  int misplaced_ = 0;
  int max_sequences_in_a_step_ = 0;
  int max_sequence_runs_ = 0;
  int max_cells_used_ = 0;
  int max_batch_ = 0;
};

}  // namespace brisk::testing
