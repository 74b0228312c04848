#include "sched/cost_warmup.h"

#include <algorithm>
#include <vector>

#include "common/clock.h"

namespace brisk {

namespace {

// Ordinary tokens spread over the vocabulary; what they say does not change what a step costs.
Token filler_token(int index, int vocabulary) {
  return static_cast<Token>((1 + static_cast<long>(index) * 7919) % std::max(2, vocabulary));
}

class WarmupSteps {
 public:
  WarmupSteps(ModelRunner& engine, int sequences, const std::function<TimePoint()>& clock)
      : engine_(engine),
        clock_(clock),
        positions_(static_cast<size_t>(sequences), 0),
        per_sequence_(engine.sequence_context_size() != engine.context_size()) {}
  ~WarmupSteps() {
    for (size_t s = 0; s < positions_.size(); ++s) {
      if (positions_[s] > 0) engine_.release_sequence(static_cast<int>(s));
    }
  }

  // One token for each of the first `sequences`, each with its logits (a decode step).
  // Returns its time in ms, or a negative number when the decode failed.
  double decode(int sequences) {
    engine_.clear_batch();
    for (int s = 0; s < sequences; ++s) add(s, true);
    return run();
  }

  // `tokens` prompt tokens of sequence 0, logits for the last only (a prompt chunk).
  double prefill(int tokens) {
    engine_.clear_batch();
    for (int i = 0; i < tokens; ++i) add(0, i + 1 == tokens);
    return run();
  }

  // `tokens` prompt tokens of sequence 0 beside one decode of each of the next `decodes`.
  double prefill_beside(int tokens, int decodes) {
    engine_.clear_batch();
    for (int s = 1; s <= decodes; ++s) add(s, true);
    for (int i = 0; i < tokens; ++i) add(0, i + 1 == tokens);
    return run();
  }

  // Every other sequence comes to hold a copy of sequence 0's cells (its saved state restored:
  // a copy of bytes, no step computed). False when the cache has no room for them.
  bool fill_from_first() {
    const std::vector<uint8_t> state = engine_.save_sequence(0);
    if (state.empty()) return false;
    release_all_but_first();
    for (size_t s = 1; s < positions_.size(); ++s) {
      if (!engine_.restore_sequence(static_cast<int>(s), state, positions_[0])) return false;
      positions_[s] = positions_[0];
    }
    return true;
  }

  // Every sequence but the first gives its cells back.
  void release_all_but_first() {
    for (size_t s = 1; s < positions_.size(); ++s) {
      engine_.release_sequence(static_cast<int>(s));
      positions_[s] = 0;
    }
  }

  // The cells each row of a step of the first `sequences` attends over (StepCosts): all in use
  // in one buffer, with a buffer per sequence its own, on average over the step's sequences.
  int attended_cells(int sequences) const {
    int all = 0;
    int in_step = 0;
    for (size_t s = 0; s < positions_.size(); ++s) {
      all += positions_[s];
      if (static_cast<int>(s) < sequences) in_step += positions_[s];
    }
    return per_sequence_ ? in_step / std::max(1, sequences) : all;
  }

 private:
  void add(int sequence, bool logits) {
    int& position = positions_[static_cast<size_t>(sequence)];
    engine_.add_to_batch(filler_token(position + sequence * 31, engine_.vocabulary_size()),
                         position, sequence, logits);
    ++position;
  }

  double run() {
    const TimePoint began = clock_();
    if (engine_.decode() != DecodeStatus::ok) return -1;
    engine_.synchronize();
    return ms_between(began, clock_());
  }

  ModelRunner& engine_;
  const std::function<TimePoint()>& clock_;
  std::vector<int> positions_;
  const bool per_sequence_;
};

// A step measured, and the cells its rows attended over.
struct Measured {
  double ms = -1;
  int cells = 0;
};

}  // namespace

WarmupResult warm_up_step_costs(ModelRunner& engine, StepCosts& costs, int max_seqs,
                                int chunk_tokens, const std::function<TimePoint()>& clock,
                                const std::vector<int>& more_decode_batches) {
  WarmupResult result;
  const TimePoint began = clock();
  const int sequences = std::clamp(max_seqs, 1, std::max(1, engine.sequence_ids()));
  constexpr int kDecodeSteps = 3;
  constexpr int kChunks = 2;
  // A chunk of fewer prompt tokens than the tiled kernel takes (StepCosts::kTiledChunkTokens)
  // beside a few decodes: what a chunk cut to --target-itl-ms beside decodes often is. Alone,
  // 32 tokens priced 1.55 ms a token where a 2-vCPU cold burst's ~45-token chunks beside ~5
  // decodes cost ~2.2 ms.
  constexpr int kSmallChunkTokens = 32;
  const int small_chunk_decodes = std::min(4, sequences - 1);
  // Room in sequence 0 for the chunks and its decodes: a first step, then four kinds of
  // kDecodeSteps (one sequence, the full batch at three fills) and the more batches', and one
  // spare.
  const int decode_kinds = 4 + static_cast<int>(more_decode_batches.size());
  const int room = (engine.sequence_context_size() - decode_kinds * kDecodeSteps - 2) / kChunks;
  // The small chunks when there is room for them beside a tiled one.
  const bool small_chunks = chunk_tokens >= StepCosts::kTiledChunkTokens &&
                            room >= StepCosts::kTiledChunkTokens + kSmallChunkTokens;
  const int chunk = std::min(chunk_tokens, small_chunks ? room - kSmallChunkTokens : room);
  if (chunk < StepCosts::kMinChunkTokens) return result;
  result.sequences = sequences;
  result.prompt_chunk_tokens = chunk;
  Measured one;
  Measured chunk_step;
  Measured small_chunk_step;
  Measured full;
  Measured full_filled;
  std::vector<std::pair<int, Measured>> more;  // by batch
  {
    WarmupSteps steps(engine, sequences, clock);
    // The first step, at the full batch, faults in the buffers: not counted. Of the rest, each
    // kind's fastest is learned: on a shared machine another process only ever adds time, and
    // one step slowed tenfold (CI: another server loading beside it) priced a 150-token
    // request at 30 s and refused the request behind it. Each is taken at the cells its rows
    // attended over at its first run.
    if (steps.decode(sequences) < 0) return result;
    const auto fastest = [](int times, int cells, const auto& step) {
      Measured best{-1, cells};
      for (int i = 0; i < times; ++i) {
        const double ms = step();
        if (ms < 0) return Measured{};
        best.ms = best.ms < 0 ? ms : std::min(best.ms, ms);
      }
      return best;
    };
    one = fastest(kDecodeSteps, steps.attended_cells(1), [&] { return steps.decode(1); });
    if (one.ms < 0) return result;
    chunk_step = fastest(kChunks, steps.attended_cells(1), [&] { return steps.prefill(chunk); });
    if (chunk_step.ms < 0) return result;
    if (small_chunks) {
      small_chunk_step =
          fastest(kChunks, steps.attended_cells(1 + small_chunk_decodes),
                  [&] { return steps.prefill_beside(kSmallChunkTokens, small_chunk_decodes); });
      if (small_chunk_step.ms < 0) return result;
    }
    for (const int batch : more_decode_batches) {
      if (batch <= 1 || batch >= sequences) continue;
      more.emplace_back(batch, fastest(kDecodeSteps, steps.attended_cells(batch),
                                       [&] { return steps.decode(batch); }));
      if (more.back().second.ms < 0) return result;
    }
    full = fastest(kDecodeSteps, steps.attended_cells(sequences),
                   [&] { return steps.decode(sequences); });
    if (full.ms < 0) return result;
    // The full batch again once every sequence holds as many cells as sequence 0, and once
    // more when they gave them back: what a row pays per cell it attends over (a burst's steps
    // run at thousands of cells, the steps above at a few hundred). Its effect is a fifth of a
    // step on a 2-vCPU machine, near its noise: the emptier fill's step is the faster of its
    // two measurements, before and after. Skipped when one sequence runs alone or the cache
    // has no room.
    if (sequences > 1 && steps.fill_from_first()) {
      full_filled = fastest(kDecodeSteps, steps.attended_cells(sequences),
                            [&] { return steps.decode(sequences); });
      steps.release_all_but_first();
      const Measured again = fastest(kDecodeSteps, steps.attended_cells(sequences),
                                     [&] { return steps.decode(sequences); });
      if (again.ms < 0) return result;
      if (again.ms < full.ms) full = again;
    }
  }
  if (full_filled.ms > 0 && full_filled.cells > full.cells) {
    costs.set_row_cell_ms(std::max(0.0, full_filled.ms - full.ms) /
                          (static_cast<double>(sequences) * (full_filled.cells - full.cells)));
  }
  const auto learn = [&](const Measured& step, int decodes, int prompt_tokens) {
    costs.set_attended_cells(step.cells);
    costs.learn_step(decodes, prompt_tokens, step.ms);
  };
  learn(one, 1, 0);
  for (const auto& [batch, step] : more) learn(step, batch, 0);
  learn(chunk_step, 0, chunk);
  // The full batch last of the decodes: the batch a burst runs at, and the one decode_step_ms()
  // prices. The small chunk after it, beside decodes priced from the batches measured.
  learn(full, sequences, 0);
  if (small_chunks) learn(small_chunk_step, small_chunk_decodes, kSmallChunkTokens);
  costs.set_attended_cells(0);  // the cache is empty again
  costs.mark_settled();
  result.ok = true;
  result.decode_one_ms = costs.decode_step_ms(1);
  result.decode_full_ms = costs.decode_step_ms(sequences);
  result.prefill_ms_per_token = costs.prefill_ms_per_token();
  result.small_chunk_prefill_ms_per_token = small_chunks ? costs.prompt_token_ms(1) : 0;
  result.row_cell_ms = costs.row_cell_ms();
  result.filled_cells = full_filled.cells;
  result.seconds = seconds_between(began, clock());
  return result;
}

}  // namespace brisk
