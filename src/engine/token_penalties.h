#pragma once

#include <deque>
#include <span>
#include <unordered_map>

#include "engine/token.h"

namespace brisk {

// The penalties a request may ask for against tokens it has seen, as the servers that define
// them apply them:
// - presence and frequency (OpenAI's presence_penalty and frequency_penalty, as vLLM applies
//   them): a token's logit goes down by presence once it has been generated, and by frequency
//   for each time it has; only the answer's tokens count.
// - repetition (vLLM's repetition_penalty, llama.cpp's repeat_penalty): a token seen in the
//   prompt or the answer has its logit divided by it when positive, multiplied when negative;
//   `repetition_last_n` looks back over only the last N of those tokens (llama.cpp's
//   repeat_last_n; -1: all of them).
struct PenaltyParams {
  float presence = 0.0f;
  float frequency = 0.0f;
  float repetition = 1.0f;  // 1: off
  int repetition_last_n = -1;

  bool any() const {
    return presence != 0.0f || frequency != 0.0f ||
           (repetition != 1.0f && repetition_last_n != 0);
  }
};

// The tokens one sequence has seen, counted for its penalties. Only tokens seen are touched, so
// applying them costs what the sequence has seen, not the vocabulary.
class TokenPenalties {
 public:
  explicit TokenPenalties(const PenaltyParams& params) : params_(params) {}

  // The prompt's tokens: the repetition penalty sees them, presence and frequency do not.
  void add_prompt(std::span<const Token> prompt);
  // A generated token.
  void add_generated(Token token);
  // Applies the penalties to `logits` (one per vocabulary entry); tokens outside it are skipped.
  void apply(float* logits, int count) const;

 private:
  void see(Token token);

  PenaltyParams params_;
  std::unordered_map<Token, int> generated_;  // presence and frequency: the answer's counts
  std::unordered_map<Token, int> seen_;       // repetition: the window's counts
  std::deque<Token> window_;                  // the window, oldest first (with a last_n only)
};

}  // namespace brisk
