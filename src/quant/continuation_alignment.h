#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "quant/top_logprobs.h"

namespace brisk::quant {

// Where two greedy continuations of the same prompt can be compared. Over an OpenAI API the
// candidate cannot be teacher-forced on the reference's tokens, so each server generates its own
// answer; position i of both is conditioned on the same text exactly when tokens 0..i-1 agree.
// So every position up to and including the first difference is comparable (the first
// difference is where the next-token distributions disagreed on the top token), and none after.
struct ContinuationAlignment {
  size_t compared_positions = 0;
  // The first position whose tokens differ (by text), or where one answer ended and the other
  // went on; nullopt when both answers are the same tokens throughout.
  std::optional<size_t> diverged_at;
};

ContinuationAlignment align_continuations(const std::vector<TokenWithLogprobs>& reference,
                                          const std::vector<TokenWithLogprobs>& candidate);

}  // namespace brisk::quant
