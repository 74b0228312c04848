#include "quant/continuation_alignment.h"

#include <algorithm>

namespace brisk::quant {

ContinuationAlignment align_continuations(const std::vector<TokenWithLogprobs>& reference,
                                          const std::vector<TokenWithLogprobs>& candidate) {
  const size_t shorter = std::min(reference.size(), candidate.size());
  size_t agreeing = 0;
  while (agreeing < shorter && reference[agreeing].token == candidate[agreeing].token) ++agreeing;
  ContinuationAlignment alignment;
  if (agreeing < shorter) {
    alignment.compared_positions = agreeing + 1;  // the differing position itself is comparable
    alignment.diverged_at = agreeing;
  } else {
    alignment.compared_positions = agreeing;
    // One answer stopped (end of generation) where the other went on: nothing to compare there,
    // since one side has no distribution listed for that position.
    if (reference.size() != candidate.size()) alignment.diverged_at = agreeing;
  }
  return alignment;
}

}  // namespace brisk::quant
