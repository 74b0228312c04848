#pragma once

#include <string>
#include <vector>

#include "quant/quant_result.h"

namespace brisk::quant {

// Applies `gates` to the candidate's figures and sets its gates, passed, failed_gates and
// unmeasured_gates. A figure is unmeasured when nothing was there to measure it on (no checks,
// no JSON check the reference passes, no compared positions) or the mode cannot (perplexity
// over an endpoint); such a gate keeps the candidate from passing.
void judge_candidate(const std::vector<Gate>& gates, bool perplexity_measured,
                     CandidateResult* candidate);

// The candidate to ship: among those passing every gate, the fastest (decode tokens/s at
// concurrency 1) or, with prefer "memory", the least memory allocated at the run's context
// (file size on ties).
// Its summary gives the speed-up and memory saving against the reference, and says when the
// "faster" quantization is in fact slower here. None passing: "keep the reference" with the
// gates each candidate failed or could not be judged on.
Verdict choose_candidate(const ModelRun& reference, const std::vector<CandidateResult>& candidates,
                         const std::string& prefer);

}  // namespace brisk::quant
