#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/token.h"

namespace brisk {

// What the dynamic batcher needs from a stateless model: one call that turns a batch of token
// lists into one pooled output each (an L2-normalized vector; a reranker's raw scores).
// EmbeddingModel runs it on llama.cpp; the batcher's unit tests run it on a fake, so batching is
// tested without a model.
class EmbeddingRunner {
 public:
  virtual ~EmbeddingRunner() = default;

  virtual int dimensions() const = 0;
  // A batch holds at most this many tokens (all inputs together) and inputs.
  virtual int max_batch_tokens() const = 0;
  virtual int max_batch_inputs() const = 0;

  // Batcher thread only. `vectors` receives inputs.size() * dimensions() floats, input by input.
  // Returns false and sets `error` when the model could not compute the batch.
  virtual bool embed(std::span<const TokenList* const> inputs, std::vector<float>* vectors,
                     std::string* error) = 0;
};

}  // namespace brisk
