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

  // A step of `decode_tokens` decodes and `prefill_tokens` prompt tokens took `step_ms`.
  void learn_step(int decode_tokens, int prefill_tokens, double step_ms);
  // A finished request held its sequence for `held_steps` engine steps.
  void learn_hold(double held_steps);

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
  double prefill_ms_per_token() const {
    return prefill_ms_per_token_ <= 0 ? 0 : prefill_ms_per_token_ + cell_ms(1);
  }
  double target_step_ms() const { return target_step_ms_; }  // --target-itl-ms (0: off)
  // What a step of `decode_tokens` decodes and `prompt_tokens` prompt tokens is expected to
  // cost at the attended cells: its decodes' step (a one-token step's when it has none, the
  // fixed cost of any step) and each prompt token's price.
  double step_ms(int decode_tokens, int prompt_tokens) const {
    return decode_step_ms(std::max(1, decode_tokens)) + prompt_tokens * prefill_ms_per_token();
  }
  // A prompt token's share of the steps it is computed in beside `decode_tokens` decodes: the
  // chunk prefill_budget() gives it carries the step's decode cost too (0 while unknown).
  double prompt_ms_per_token_beside(int decode_tokens) const;
  // How long finished requests held their sequence: counted in steps, priced at the recent
  // step time, so holds measured while the batch was small are not taken for holds at a full
  // one (its steps are slower); 0 until a request finished.
  double mean_hold_ms() const { return mean_hold_steps_ * recent_step_ms_; }
  // Of a running request that has held its sequence `held_steps` steps: how long until it is
  // expected to give it back (0 once past the average).
  double hold_left_ms(double held_steps) const {
    return std::max(0.0, mean_hold_steps_ - held_steps) * recent_step_ms_;
  }

  static constexpr int kMinChunkTokens = 16;
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
  // prefill_budget() with the token cost given.
  int prefill_budget(int decode_tokens, double ms_per_token) const;

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
  double mean_hold_steps_ = 0;
  double recent_step_ms_ = 0;  // every step, whatever it carried; about the last 20
  int attended_cells_ = 0;
  double row_cell_ms_ = 0;
};

// What the engine thread last published about its load, for estimating a newcomer's wait.
struct LoadEstimate {
  double decode_step_ms = 0;        // learned cost of a step of decodes alone
  // A running request's step while others wait for a sequence: a full batch's decodes, and
  // with more than one sequence, at least --target-itl-ms: the scheduler fills the steps up to
  // it with the newcomers' prompts. A 2-vCPU cold burst (16 sequences, 128 tokens each) took
  // 15-19 s a request, 120-145 ms a token, where decodes alone cost 67 ms at the warm-up's
  // near-empty cache (attention over one buffer grows with the cells in use).
  double loaded_step_ms = 0;
  // A prompt token in those steps, their decodes' cost shared among the chunk's tokens
  // (StepCosts::prompt_ms_per_token_beside).
  double loaded_prefill_ms_per_token = 0;
  double prefill_ms_per_token = 0;  // learned cost of one prompt token in a step
  int backlog_tokens = 0;           // prompt (or replay) tokens the started requests still need
  int decoders = 0;                 // running requests past their prompt
  int free_slots = 0;
  // Until each running request is expected to give its sequence back, soonest first (each
  // holds one for the measured average, counted from when it started), and that average.
  std::vector<double> slot_release_ms;
  double hold_ms = 0;
  // Before any request finished: running requests whose release cannot be estimated (they
  // named no max_tokens), and the longest hold of those that named one, from their start.
  int unknown_releases = 0;
  double hold_prior_ms = 0;
  // To price a full batch at the KV cells it will hold (priced_for_requests_like): the costs
  // as learned, at the cells attended now, the batch, the cache's cells and its layout.
  StepCosts costs{0, 0};
  int max_seqs = 0;
  int cell_capacity = 0;
  bool cells_per_sequence = false;
};

// A running request's step while others wait for a sequence (LoadEstimate::loaded_step_ms) at
// `costs`' attended cells.
double loaded_step_ms(const StepCosts& costs, int max_seqs);

// `load` with every cost priced at the cells its rows will attend over once `requests` requests
// like these run (at most a full batch): in one buffer, the cells in use now and each request's
// average over its hold, half of its `prompt_tokens` and (when named) `max_tokens` (it holds
// none while its prompt waits its turn, all of them at its last token); with a buffer per
// sequence, one such request's. A cold burst is priced before its requests hold any cell, and
// its steps then ran at thousands (2 vCPUs: 90-130 ms decode steps where the warm-up measured
// 68 ms). Unchanged while no cell cost is known.
LoadEstimate priced_for_requests_like(const LoadEstimate& load, int requests, int prompt_tokens,
                                      int max_tokens);

// Milliseconds until a request arriving now would start its prompt, if `queued_tokens` prompt
// tokens (of `queued_requests` requests) wait ahead of it; each part counts once its costs are
// known (0 while nothing is). Waiting for a sequence: the running ones give theirs back when
// expected, the requests ahead take each in turn and hold it the measured average; before any
// request finished, as long as the longest of `own_hold_ms` (what this request would hold one
// for) and the running requests' named max_tokens say (a cold burst's requests look alike);
// with neither known, the estimate is a lower bound.
double estimate_queue_delay_ms(const LoadEstimate& load, int queued_tokens, int queued_requests,
                               int max_batched_tokens, double own_hold_ms = 0);

// What a request holds its sequence for while others wait, at the published costs:
// `prompt_tokens` to prefill and `max_tokens` loaded steps (0 when it named none: unknown).
double expected_hold_ms(const LoadEstimate& load, int prompt_tokens, int max_tokens);

}  // namespace brisk
