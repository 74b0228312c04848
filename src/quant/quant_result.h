#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quant/continuation_alignment.h"
#include "quant/divergence.h"
#include "quant/gates.h"
#include "quant/task_comparison.h"

namespace brisk::quant {

// Speed of one model under the run's settings, measured in-process on the dataset's prompts.
struct SpeedFigures {
  double load_ms = 0;              // model load + context creation (a server's cold start)
  double ttft_ms_mean = 0;         // prompt prefill + first token, mean over the items
  double e2e_ms_mean = 0;          // whole greedy answer, mean over the items
  double decode_tokens_per_s = 0;  // concurrency 1: tokens after the first / their time
  int concurrency = 1;             // N of the next figure
  double decode_tokens_per_s_concurrent = 0;  // N streams decoding together, all their tokens
  int requests = 0;                           // generations attempted
  int errors = 0;                             // generations that failed
  double error_rate = 0;
};

struct MemoryFigures {
  uint64_t file_bytes = 0;
  uint64_t weights_bytes = 0;  // tensors as loaded (llama_model_size)
  int context_tokens = 0;      // the KV cells of the measured context
  // llama.cpp's allocations at that context: weights, KV cache, compute buffers, and their sum.
  uint64_t kv_bytes = 0;
  uint64_t compute_bytes = 0;
  uint64_t allocated_bytes = 0;
  // Resident memory the model added to the process: after its runs, minus before its load.
  // Informative only: the allocator reuses memory freed by earlier models.
  uint64_t rss_bytes = 0;
};

// One model's own runs: answers to the dataset, speed and memory.
struct ModelRun {
  std::string name;  // the file's stem, the --make type, or the endpoint's host:port
  std::string file;
  // Set for an OpenAI-compatible endpoint: its load time, memory and file size cannot be seen
  // over HTTP, and are reported as null.
  std::string url;
  std::string model;        // the model name sent to the endpoint
  std::string description;  // llama.cpp's, e.g. "gemma3 270M Q4_K - Medium"
  SpeedFigures speed;
  MemoryFigures memory;
  std::vector<ItemAnswer> answers;  // parallel to the dataset
  bool is_endpoint() const { return !url.empty(); }
};

// Endpoints: where the candidate's greedy answer to an item left the reference's.
struct ItemAlignment {
  std::string item_id;
  ContinuationAlignment alignment;
};

struct CandidateResult {
  ModelRun run;
  std::string made_as;  // the llama-quantize type when --make produced it, else ""
  DivergenceSummary divergence;
  std::vector<ItemAlignment> alignments;  // endpoints only, parallel to the items answered
  TaskComparison tasks;
  std::vector<GateOutcome> gates;
  bool passed = false;                        // every gate measured and within its bound
  std::vector<std::string> failed_gates;      // metric names: measured, out of bounds
  std::vector<std::string> unmeasured_gates;  // metric names: no figure to judge
};

struct Verdict {
  std::optional<size_t> choice;  // index into the candidates
  std::string summary;
};

struct QuantSettings {
  int ctx_size = 0;
  int max_tokens = 0;
  int concurrency = 0;
  int threads = 0;
  std::string prefer;           // "speed" or "memory"
  std::string dataset;          // the file, or "(built-in)"
  std::string divergence_text;  // --text FILE, or "" for the dataset's continuations
  int text_ctx = 0;
};

struct QuantReport {
  // "files": GGUFs in-process, exact full-vocabulary divergence. "endpoints": OpenAI-compatible
  // servers, divergence approximated from their top_logprobs (top_n of them).
  std::string mode = "files";
  int top_n = 0;
  ModelRun reference;
  bool reference_quantized = false;  // the reference file is itself quantized
  std::string reference_type;        // its file type, e.g. "Q4_K_M"
  QuantSettings settings;
  std::vector<Gate> gates;
  std::vector<CandidateResult> candidates;
  Verdict verdict;
  std::vector<std::string> notes;  // what a reader must know to read the figures right
};

}  // namespace brisk::quant
