#pragma once

#include <algorithm>
#include <map>
#include <vector>

namespace brisk {

// What StepCosts learned, as numbers to store and load: `brisk plan calibrate` measures it through
// the real engine and the planner's simulation prices its steps with it (sched/serve_simulation.h).
// Kept as at no attended cell; row_cell_ms adds what each row pays per cell it attends over.
struct StepCostTable {
  std::map<int, double> decode_ms_by_batch;  // a step of decodes alone, by batch
  double prefill_ms_per_token = 0;           // beyond the decodes of its step
  // The same in a step of fewer than StepCosts::kTiledChunkTokens prompt tokens (0: unknown,
  // priced as prefill_ms_per_token).
  double small_chunk_prefill_ms_per_token = 0;
  double row_cell_ms = 0;
  bool empty() const { return decode_ms_by_batch.empty(); }
};

// What an engine step costs on this machine, learned from the steps run (moving averages), and
// what follows from it: the prompt chunk that keeps a step under --target-itl-ms, and how long
// finished requests held their sequence. Engine thread only; no clock, so tests feed it times.
class StepCosts {
 public:
  // `min_prefill_step_tokens`: a step that carries prompt tokens carries at least this many
  // tokens in all, decodes included, whatever the target says; `min_alone_chunk_tokens`: a long
  // prompt's chunk in a step without decodes is at least this many tokens (SchedulerOptions).
  StepCosts(double target_step_ms, int max_batched_tokens, int min_prefill_step_tokens = 0,
            int min_alone_chunk_tokens = 0)
      : target_step_ms_(target_step_ms),
        max_batched_tokens_(max_batched_tokens),
        min_prefill_step_tokens_(min_prefill_step_tokens),
        min_alone_chunk_tokens_(min_alone_chunk_tokens) {}

  // Costs as a table measured elsewhere says, settled (no step of this process needed).
  static StepCosts from_table(const StepCostTable& table, double target_step_ms,
                              int max_batched_tokens);
  StepCostTable table() const;
  // Takes the table's costs as learned, settled; the target and floors stay this one's.
  void adopt(const StepCostTable& table);

  // A step of `decode_tokens` decodes and `prefill_tokens` prompt tokens took `step_ms`.
  void learn_step(int decode_tokens, int prefill_tokens, double step_ms);

  // The KV cells each row of a step attends over: every cell in use when the cache is one
  // buffer (llama.cpp's view spans them, masked per sequence), the row's own sequence's with a
  // buffer per sequence. Engine thread: set before a step is planned; the step learned after it
  // is taken to have run at these cells, and every cost below is priced at them.
  void set_attended_cells(int cells) { attended_cells_ = std::max(0, cells); }
  int attended_cells() const { return attended_cells_; }
  // What each row of a step (a decode, or a prompt token) pays per cell it attends over,
  // measured by the warm-up at two fills (0: unknown, steps priced as measured). A 2-vCPU
  // decode step of 16 sequences cost 68 ms at the warm-up's ~260 cells and 90-100 ms at a cold
  // burst's ~6k (one buffer: each row reads the mask over every cell in use).
  void set_row_cell_ms(double ms) { row_cell_ms_ = std::max(0.0, ms); }
  double row_cell_ms() const { return row_cell_ms_; }
  // These costs priced at `cells` attended cells instead of the current ones.
  StepCosts at_attended_cells(int cells) const {
    StepCosts out = *this;
    out.set_attended_cells(cells);
    return out;
  }

  // Prompt tokens that fit beside `decode_tokens` decodes in one step of the target: the whole
  // token budget while the costs are unknown, the target is off or nothing decodes (no stream
  // to protect); never under a floor that keeps prompts moving when decodes alone use it up, nor
  // so small that the step falls under min_prefill_step_tokens.
  int prefill_budget(int decode_tokens) const;
  // Tokens of a long prompt's chunk beside `decode_tokens` decodes. While nothing decodes it is
  // still cut to the target: a newcomer's first token waits for the step, and a 320-token
  // prompt in one step made short requests wait all of it (brisk doctor's mixed probe). Never
  // so small that a step's fixed cost (a one-token step's) is more than a quarter of it; the
  // whole budget until a decode step tells that cost, and never under min_alone_chunk_tokens
  // while nothing decodes.
  int long_chunk_budget(int decode_tokens) const;

  // A step of decodes alone at the batch measured last (the running set's), and at `batch`:
  // each batch size has its own average (a 2-vCPU step took 20 ms at 1 sequence and 83 at 8),
  // interpolated between the sizes measured and extended along the slope of the last two.
  double decode_step_ms() const { return decode_step_ms(last_decode_batch_); }
  double decode_step_ms(int batch) const;
  // Enough decode steps measured that the first ones (a new server's first steps fault in its
  // buffers and run several times slower) weigh little in the average.
  bool decode_cost_settled() const { return decode_steps_measured_ >= kSettledDecodeSteps; }
  // The costs came from a warm-up whose first, slow step was left out: settled already.
  void mark_settled() {
    decode_steps_measured_ = std::max(decode_steps_measured_, kSettledDecodeSteps);
  }
  // A prompt token in a step of kTiledChunkTokens prompt tokens or more (until such a step is
  // measured, as in smaller ones).
  double prefill_ms_per_token() const {
    const double base =
        prefill_ms_per_token_ > 0 ? prefill_ms_per_token_ : small_chunk_prefill_ms_per_token_;
    return base <= 0 ? 0 : base + cell_ms(1);
  }
  // A prompt token in a step of `prompt_tokens` prompt tokens: below kTiledChunkTokens they
  // take ggml-cpu's per-row attention kernel (engine/attention_calls.h), and a 2-vCPU cold
  // burst's steps of ~55 prompt tokens cost 1.24x what the warm-up's 128-token chunk priced.
  // Until such a step is measured, as in larger ones.
  double prompt_token_ms(int prompt_tokens) const {
    if (prompt_tokens >= kTiledChunkTokens || small_chunk_prefill_ms_per_token_ <= 0) {
      return prefill_ms_per_token();
    }
    return small_chunk_prefill_ms_per_token_ + cell_ms(1);
  }
  // What a step of `decode_tokens` decodes and `prompt_tokens` prompt tokens is expected to
  // cost at the attended cells: its decodes' step (a one-token step's when it has none, the
  // fixed cost of any step) and each prompt token's price.
  double step_ms(int decode_tokens, int prompt_tokens) const {
    return decode_step_ms(std::max(1, decode_tokens)) +
           prompt_tokens * prompt_token_ms(prompt_tokens);
  }
  static constexpr int kMinChunkTokens = 16;
  // Prompt tokens from which a step's prompt rows take ggml-cpu's tiled attention kernel
  // (engine/attention_calls.h, kTiledAttentionRows); fewer are priced on their own.
  static constexpr int kTiledChunkTokens = 64;
  // A long chunk alone carries at least this many times a step's fixed cost in prompt tokens.
  static constexpr double kMinAloneChunkOverFixedCost = 3;
  static constexpr int kSettledDecodeSteps = 16;

 private:
  // The least of the chunk floors: kMinChunkTokens, and what brings the step to
  // min_prefill_step_tokens beside `decode_tokens` decodes.
  int chunk_floor(int decode_tokens) const;
  // What `rows` rows pay for the attended cells.
  double cell_ms(int rows) const { return row_cell_ms_ * rows * attended_cells_; }
  // A step of decodes alone as at no attended cell.
  double base_decode_step_ms(int batch) const;
  // The most prompt tokens `spare_ms` pays for: a tiled chunk when one fits, else a small one.
  int timed_chunk_tokens(double spare_ms) const;

  double target_step_ms_;
  int max_batched_tokens_;
  int min_prefill_step_tokens_;
  int min_alone_chunk_tokens_;
  // Learned costs are kept as at no attended cell; cell_ms() adds the cells' part.
  std::map<int, double> decode_ms_by_batch_;  // steps of decodes alone, by batch
  int last_decode_batch_ = 0;
  int decode_steps_measured_ = 0;
  // One prompt token, beyond the decodes of its step (beyond a one-token step's cost when
  // nothing decodes: what a step costs whatever it carries is not the tokens').
  double prefill_ms_per_token_ = 0;
  double small_chunk_prefill_ms_per_token_ = 0;  // in steps of fewer than kTiledChunkTokens
  int attended_cells_ = 0;
  double row_cell_ms_ = 0;
};

}  // namespace brisk
