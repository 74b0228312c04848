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
  WarmupSteps(ModelRunner& engine, int sequences)
      : engine_(engine), positions_(static_cast<size_t>(sequences), 0) {}
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

 private:
  void add(int sequence, bool logits) {
    int& position = positions_[static_cast<size_t>(sequence)];
    engine_.add_to_batch(filler_token(position + sequence * 31, engine_.vocabulary_size()),
                         position, sequence, logits);
    ++position;
  }

  double run() {
    const TimePoint began = Clock::now();
    if (engine_.decode() != DecodeStatus::ok) return -1;
    engine_.synchronize();
    return ms_between(began, Clock::now());
  }

  ModelRunner& engine_;
  std::vector<int> positions_;
};

}  // namespace

WarmupResult warm_up_step_costs(ModelRunner& engine, StepCosts& costs, int max_seqs,
                                int chunk_tokens) {
  WarmupResult result;
  const TimePoint began = Clock::now();
  const int sequences = std::clamp(max_seqs, 1, std::max(1, engine.sequence_ids()));
  constexpr int kDecodeSteps = 3;
  constexpr int kChunks = 2;
  // Room in sequence 0 for its share of the decodes and the chunks.
  const int room = (engine.sequence_context_size() - 2 * kDecodeSteps - 2) / kChunks;
  const int chunk = std::min(chunk_tokens, room);
  if (chunk < StepCosts::kMinChunkTokens) return result;
  result.sequences = sequences;
  result.prompt_chunk_tokens = chunk;
  {
    WarmupSteps steps(engine, sequences);
    // The first step, at the full batch, faults in the buffers: not counted. Of the rest, each
    // kind's fastest is learned: on a shared machine another process only ever adds time, and
    // one step slowed tenfold (CI: another server loading beside it) priced a 150-token
    // request at 30 s and refused the request behind it.
    if (steps.decode(sequences) < 0) return result;
    const auto fastest = [](int times, const auto& step) {
      double best = -1;
      for (int i = 0; i < times; ++i) {
        const double ms = step();
        if (ms < 0) return -1.0;
        best = best < 0 ? ms : std::min(best, ms);
      }
      return best;
    };
    const double one_ms = fastest(kDecodeSteps, [&] { return steps.decode(1); });
    if (one_ms < 0) return result;
    costs.learn_step(1, 0, one_ms);
    const double chunk_ms = fastest(kChunks, [&] { return steps.prefill(chunk); });
    if (chunk_ms < 0) return result;
    costs.learn_step(0, chunk, chunk_ms);
    // The full batch last: the batch a burst runs at, and the one decode_step_ms() prices.
    const double full_ms = fastest(kDecodeSteps, [&] { return steps.decode(sequences); });
    if (full_ms < 0) return result;
    costs.learn_step(sequences, 0, full_ms);
  }
  costs.mark_settled();
  result.ok = true;
  result.decode_one_ms = costs.decode_step_ms(1);
  result.decode_full_ms = costs.decode_step_ms(sequences);
  result.prefill_ms_per_token = costs.prefill_ms_per_token();
  result.seconds = seconds_between(began, Clock::now());
  return result;
}

}  // namespace brisk
