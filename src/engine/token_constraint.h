#pragma once

#include "engine/token.h"

namespace brisk {

// What a request allows the model to generate next, token by token (a grammar: a JSON schema,
// json_object, GBNF). The sampler draws first and asks allows() of the drawn token; only when
// it is refused does it mask the whole vocabulary and draw again from what is left (llama.cpp's
// own order), so a constrained draw costs one check per token while the model follows the
// grammar. One per sequence; used by one thread at a time.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(Token token) = 0;
  // Sets the logit of every token not allowed now to -infinity; returns how many are allowed.
  virtual int mask(float* logits, int vocabulary_size) = 0;
  // Moves past `token`, one allows() accepted.
  virtual void accept(Token token) = 0;
};

}  // namespace brisk
