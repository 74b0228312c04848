#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/token.h"

namespace brisk {

enum class DecodeStatus { ok, no_kv_space, failed };

// What the scheduler needs from a model: a KV cache of sequences, one batch per step, logits,
// and the vocabulary's text. Engine runs it on llama.cpp; the scheduler's unit tests run it on
// a fake (tests/unit/fake_model_runner.h), so scheduling is tested without a model.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // KV cells in all; cells one sequence may use (all of them when the cache is one stream).
  virtual int context_size() const = 0;
  virtual int sequence_context_size() const = 0;
  // Sequence ids the cache keeps apart (running requests and cached prefixes).
  virtual int sequence_ids() const = 0;
  // Positions a sliding-window layer attends back over (0: no sliding window, or full-size
  // window caches).
  virtual int sliding_window_tokens() const = 0;
  virtual int vocabulary_size() const = 0;
  virtual bool is_end_of_generation(Token token) const = 0;
  virtual std::string token_piece(Token token) const = 0;

  // Engine thread only.
  virtual void clear_batch() = 0;
  virtual int batch_size() const = 0;
  // Returns the token's index in the batch.
  virtual int add_to_batch(Token token, int position, int sequence, bool want_logits) = 0;
  // no_kv_space: no room for the batch and nothing of it applied; the caller may free cells
  // and try again.
  virtual DecodeStatus decode() = 0;
  // Waits until the last decode's work has finished on every backend; for timing.
  virtual void synchronize() = 0;
  // The logits of batch position `batch_index` of the last decode (vocabulary_size() floats);
  // valid until the next decode, readable from any thread until then.
  virtual const float* logits(int batch_index) = 0;
  // Frees every KV cell of the sequence.
  virtual void release_sequence(int sequence) = 0;
  // `destination` (empty) comes to hold `source`'s first `tokens` positions: in one KV buffer
  // this adds an owner to each cell, no data is copied; with a buffer per sequence the cells
  // are copied into the destination's.
  virtual void copy_sequence_prefix(int source, int destination, int tokens) = 0;
  // Frees the sequence's cells from position `tokens` on, keeping its first `tokens`.
  virtual void keep_sequence_prefix(int sequence, int tokens) = 0;
  // The first position the sequence still holds in its sliding-window cache (0 when it holds
  // all, or the model has none): llama.cpp reuses masked window cells when it needs room.
  virtual int sequence_window_start(int sequence) const = 0;
  // The sequence's KV cells as bytes in host memory (the prefix cache's host tier), to restore
  // later into any empty sequence; empty when there is nothing to save.
  virtual std::vector<uint8_t> save_sequence(int sequence) = 0;
  // Restores bytes of save_sequence() into the empty `sequence` and keeps its first `tokens`
  // positions. False, with the sequence left empty, when the cache has no room for them.
  virtual bool restore_sequence(int sequence, std::span<const uint8_t> state, int tokens) = 0;
};

}  // namespace brisk
