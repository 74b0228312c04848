#pragma once

#include <span>
#include <vector>

namespace brisk {

// How one step's batch is cut into llama_decode calls so that ggml-cpu's flash attention stays
// proportional to each sequence's own context in one KV buffer.
//
// ggml-cpu takes its tiled flash-attention kernel when a call has 64 query rows or more
// (GGML_FA_TILE_Q). The tiled kernel skips a tile of KV cells only when every query row of its
// 64-row tile masks all of it, and a step's decodes are one row per sequence: with one KV buffer
// no tile is skippable, so every decode reads every cell in use (64 streams: 68% of the step in
// attention, docs/scheduling.md "KV layout"). Below 64 rows ggml takes its per-row kernel,
// which skips each masked cell: a decode then reads only its own sequence's cells. A prompt
// chunk is the opposite: its rows attend to the same cells, and the tiled kernel is several
// times faster per prompt token than the per-row one (docs/scheduling.md "Chunk sizes").
//
// So a batch of `max_rows + 1` rows or more is cut: its leading single-token rows (the
// decodes, StepPlan puts them first) into balanced calls of at most `max_rows` rows, and the
// rest (prompt chunks) into one call of its own when it has 64 rows or more; fewer, it joins
// the per-row calls. Each call is one more pass over the weights, the price of the cut.
struct AttentionCall {
  int first = 0;  // batch rows [first, first + rows)
  int rows = 0;
};

// The calls for a batch whose row i belongs to `sequence_of_row[i]`, in the order to run them:
// the prompt-chunk call first, the single-row calls after (the last call's logits stay in
// llama.cpp's buffer; the others' are copied out). One call for the whole batch when it has at
// most `max_rows` rows or `max_rows` is 0 (off).
std::vector<AttentionCall> plan_attention_calls(std::span<const int> sequence_of_row,
                                                int max_rows);

// The most rows a call may have and still take ggml-cpu's per-row kernel.
inline constexpr int kMaxPerRowAttentionRows = 63;
// The fewest rows with which a call takes ggml-cpu's tiled kernel (GGML_FA_TILE_Q).
inline constexpr int kTiledAttentionRows = kMaxPerRowAttentionRows + 1;

}  // namespace brisk
