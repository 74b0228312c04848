#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "quant/dataset.h"
#include "quant/quant_result.h"

namespace brisk::quant {

struct CandidateFile {
  std::string name;
  std::string path;
  std::string made_as;  // the --make type, or ""
};

struct QuantRunInputs {
  std::string reference;
  std::vector<CandidateFile> candidates;
  std::vector<DatasetItem> items;
  std::vector<Gate> gates;
  QuantSettings settings;
  int concurrent_tokens = 16;  // tokens each stream decodes in the concurrency-N run
  int text_chunks = -1;        // --text: how many chunks to score (-1: all)
  bool reference_quantized = false;
  std::string reference_type;
  bench::ProgressStyle progress = bench::ProgressStyle::off;
};

// Runs the whole comparison: the reference's answers and speed, then for each candidate its
// answers, speed, memory and its divergence from the reference, teacher-forced over the
// reference's own continuations (or over --text, chunked as llama-perplexity does), the task
// comparison, the gates and the verdict. Nullopt with `error` when a model cannot be loaded or
// compared (another vocabulary, a text too short).
std::optional<QuantReport> run_quant(const QuantRunInputs& inputs, std::string* error);

}  // namespace brisk::quant
