#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/scoring_model.h"
#include "quant/dataset.h"
#include "quant/quant_result.h"

namespace brisk::quant {

// The dataset rendered for one model family: the token sequence each item's answer follows.
// Built once with the reference, so reference and candidates see the very same tokens.
struct PreparedPrompt {
  TokenList tokens;
  int max_tokens = 0;
};

std::optional<std::vector<PreparedPrompt>> prepare_prompts(const ScoringModel& model,
                                                           const std::vector<DatasetItem>& items,
                                                           int default_max_tokens,
                                                           std::string* error);

// Resident set size of this process, from /proc/self/statm (0 where unreadable).
uint64_t resident_bytes();

// Generates each prompt's greedy answer and runs the concurrency-N decode, filling `run`'s
// answers, speed and continuation tokens (parallel to the prompts). `after_item` is called after
// each generation (progress). A failed generation counts as an error with an empty answer.
void measure_model(ScoringModel& model, const std::vector<DatasetItem>& items,
                   const std::vector<PreparedPrompt>& prompts, int concurrency,
                   int concurrent_tokens, ModelRun* run, std::vector<TokenList>* continuations,
                   const std::function<void()>& after_item);

}  // namespace brisk::quant
