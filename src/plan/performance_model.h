#pragma once

#include <map>
#include <string>
#include <vector>

#include "plan/hardware_catalog.h"
#include "sched/step_costs.h"
#include "plan/model_profile.h"
#include "plan/precision.h"

namespace brisk::plan {

// How much of a device's published peak a serving engine achieves. Defaults are typical of
// vLLM/llama.cpp on that class of device; `brisk plan calibrate` measures them on a local one.
struct Efficiency {
  double bandwidth = 0;         // achieved / published memory bandwidth
  double compute = 0;           // achieved / published dense rate, decode tokens (small batches)
  double prefill_compute = 0;   // the same for prompt tokens (large matrix products)
  double step_overhead_ms = 0;  // per engine step: launches, scheduling
  // Picking a token from the logits on the host, per sampled token and vocabulary entry (0 where
  // the engine samples on the GPU).
  double sample_ns_per_vocab_entry = 0;
  std::string origin;  // "default for a GPU" or "calibrated on ... (date)"
  // A calibration's measured decode step over its roofline fit, at each batch it timed: how
  // this device's kernels depart from max(memory, compute) as the batch grows (on the 2-vCPU
  // test VM each of the first few sequences added ~11 ms to a 20 ms step, then ~6 ms each).
  // Empty: no correction.
  struct BatchScale {
    double batch = 0;
    double scale = 1;
  };
  std::vector<BatchScale> decode_batch_scale;  // by batch, ascending
  // What brisk serve's steps cost for a model on this device, measured by `brisk plan calibrate`
  // through the engine as serve's warm-up measures them: the planner then runs brisk serve's
  // own scheduler on them (plan/served_simulation.h) instead of the roofline. By model name.
  struct MeasuredSteps {
    StepCostTable table;
    bool attention_on_gpu = false;
  };
  std::map<std::string, MeasuredSteps> measured_steps;

  static Efficiency defaults_for(const DeviceSpec& device);
  // decode_batch_scale at `batch`, linear in log(batch) between the timed batches and held
  // beyond them; 1 without a table.
  double decode_scale(double batch) const;
};

// The smallest efficiency a prediction uses (1e-4 of a peak).
constexpr double kMinEfficiency = 1e-4;
// An efficiency as a prediction uses it: a calibration is a measurement and can be off (a noisy
// run, a catalog spec below this machine's), but the physical limits hold whatever it says: no
// fraction above 1 (faster than the device's peak) and none at 0 (a division by zero).
double physical_efficiency(double fraction);

// The time of one engine step and its parts, for --explain.
struct StepCost {
  double weight_bytes = 0;   // per device
  double kv_bytes = 0;       // per device
  double flops = 0;          // per device
  double prefill_flops = 0;  // per device, the prompt tokens' share of flops
  double memory_ms = 0;
  double compute_ms = 0;
  double overhead_ms = 0;  // per step, sampling included
  double interconnect_ms = 0;
  // What Efficiency::decode_batch_scale adds to (or takes from) the step's decode part.
  double batch_correction_ms = 0;
  double total_ms = 0;
  bool memory_bound() const { return memory_ms >= compute_ms; }
};

// Prompt tokens of one request carried by a step: `tokens` more after the `context` tokens of
// its prompt that earlier steps prefilled.
struct PromptChunk {
  double tokens = 0;
  double context = 0;
};

// The smallest prompt chunk brisk serve's step target leaves (StepCosts::kMinChunkTokens).
constexpr double kMinTimedChunkTokens = 16;
// A long prompt's chunk while nothing decodes carries at least this many times a step's fixed
// cost in prompt tokens (StepCosts::kMinAloneChunkOverFixedCost).
constexpr double kMinAloneChunkOverFixedCost = 3;

// How brisk serve cuts prompt chunks (its flags of the same names): the planner simulates it,
// and `--emit` deploys what was simulated.
struct ChunkPolicy {
  // --target-itl-ms (0: off): while requests decode, prompt chunks are cut so a step stays under
  // it (StepCosts::prefill_budget), unless more short prompts wait than one step carries; a
  // long prompt's chunks are cut so while nothing decodes too (StepCosts::long_chunk_budget).
  double target_step_ms = 150;
  // --long-prefill-tokens and --max-long-prefills: a longer prompt is long; at most that many
  // long prompts are prefilled at once.
  int long_prefill_tokens = 256;
  int max_long_prefills = 1;

  bool is_long_prompt(int prompt_tokens) const {
    return long_prefill_tokens > 0 && prompt_tokens > long_prefill_tokens;
  }
};

// One model served by `devices` identical devices with tensor parallelism.
struct Deployment {
  const DeviceSpec* device = nullptr;
  int devices = 1;
  ModelProfile model;
  Precision precision;
  Efficiency efficiency;
  double kv_bytes_per_element = 2;  // f16 cache
  int step_token_budget = 512;      // tokens one step carries (chunked prefill size)
  ChunkPolicy chunking;
  // brisk serve --max-seqs: at most this many requests prefill or decode at once, the rest wait
  // in the queue (0: no cap; memory then decides, as brisk plan sizes it).
  int max_sequences = 0;

  // Predict loads with brisk serve's own scheduler (plan/served_simulation.h) where the
  // calibration measured this model's steps on this device (brisk plan --simulator serve).
  bool simulate_server = false;
  // The steps the served simulation prices: this model's as measured on its device, when a
  // calibration has them and simulate_server is on; null otherwise (the roofline simulation).
  const Efficiency::MeasuredSteps* measured_steps() const;

  // One step decoding `decode_batch` sequences whose mean context is `decode_context`, plus
  // prompt chunks, each of its own request: a chunk's tokens attend to its own prompt only.
  StepCost step(double decode_batch, double decode_context,
                const std::vector<PromptChunk>& prompts) const;
  // max(memory, compute) + overhead of that step, without Efficiency::decode_batch_scale.
  StepCost roofline_step(double decode_batch, double decode_context,
                         const std::vector<PromptChunk>& prompts) const;
  // The same with at most one prompt chunk: `prefill_tokens` tokens of a request whose prompt so
  // far is `prefill_context`.
  StepCost step(double decode_batch, double decode_context, double prefill_tokens = 0,
                double prefill_context = 0) const;
  // A whole prompt of `prompt_tokens` prefilled alone, chunk by chunk; its first
  // `cached_tokens` come from a prefix cache (attended to, not computed).
  double prefill_ms(int prompt_tokens, int cached_tokens = 0) const;
  // Extra step time a prompt's chunks add to steps that also decode `decode_batch` sequences.
  double prefill_extra_ms(int prompt_tokens, double decode_batch, double decode_context,
                          int cached_tokens = 0) const;
  // Prefill chunks a prompt takes when each step also decodes `decode_batch` sequences.
  int prefill_chunks(int prompt_tokens, double decode_batch) const;
  // Prompt tokens brisk serve puts beside `decode_batch` decodes so the step stays under
  // chunking.target_step_ms: the largest chunk (continuing a prompt at `prompt_context`) whose
  // step fits, at least kMinTimedChunkTokens and at most `room`; `room` itself while nothing
  // decodes or the target is off.
  double timed_prefill_tokens(double decode_batch, double decode_context, double prompt_context,
                              double room) const;
  // Tokens of a long prompt's chunk (at `prompt_context`) in a step that decodes nothing: the
  // largest whose step fits the target or, where a step's fixed cost (a one-token step's) leaves
  // little of it, four times that cost; at least kMinTimedChunkTokens and at most `room`.
  double alone_long_chunk_tokens(double prompt_context, double room) const;
};

}  // namespace brisk::plan
