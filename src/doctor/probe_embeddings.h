#pragma once

#include <optional>
#include <string>

#include "doctor/probe_plan.h"

namespace brisk::doctor {

// The embeddings probe: a cold request, then closed-loop load points at concurrency 1, 2, 4, …
// (doubling) of requests of `inputs_per_request` unique inputs of `workload.short_input_tokens`
// tokens, until throughput stops growing, the SLO is missed, --max-concurrency or the budget is
// reached. Around each point /metrics is read, so brisk serve's batcher says what it did during
// that point alone (batches, inputs per batch, window wait, tokenize and model time).
std::optional<ProbeOutcome> run_embedding_probe(const ProbeOptions& options, std::string& error);

}  // namespace brisk::doctor
