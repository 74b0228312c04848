#pragma once

#include <string>
#include <vector>

#include "quant/quant_result.h"

namespace brisk::quant {

// The candidate to ship: among those passing every gate, the fastest (decode tokens/s at
// concurrency 1) or, with prefer "memory", the least memory allocated at the run's context
// (file size on ties).
// Its summary gives the speed-up and memory saving against the reference, and says when the
// "faster" quantization is in fact slower here. None passing: "keep the reference" with the
// gates each candidate failed.
Verdict choose_candidate(const ModelRun& reference, const std::vector<CandidateResult>& candidates,
                         const std::string& prefer);

}  // namespace brisk::quant
