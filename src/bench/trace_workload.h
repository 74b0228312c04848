#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/chat_session.h"
#include "bench/sampling_options.h"
#include "bench/workload.h"
#include "common/request_trace.h"

namespace brisk::bench {

// How a trace is replayed: its arrival offsets times `time_scale` (0.5 replays twice as fast),
// only the arrivals before `max_duration_s` (after scaling).
struct TraceReplayOptions {
  double time_scale = 1.0;
  std::optional<double> max_duration_s;
};

// The requests of a trace to send, in arrival order, with their scaled offsets; an error when
// the options are out of range or keep no request.
struct TraceSchedule {
  std::vector<TraceRecord> records;
  std::vector<double> offsets_s;
};
std::optional<TraceSchedule> schedule_trace(const Trace& trace, const TraceReplayOptions& options,
                                            std::string& error);

// Replays a trace's requests through /v1/completions: each with the record's prompt length and
// exactly its output length (max_tokens + ignore_eos), and prompts that share a prefix exactly
// where the record's block hashes repeat, so the target's prefix cache meets the recorded
// sharing. With `token_pool` (ordinary words' token ids on the target's tokenizer) the prompt is
// sent as token ids and its length is exact; without one (no /tokenize) it is filler words of
// the calibrated length, and the lengths are approximate. Request i (after `warmup` short warmup
// requests that share nothing) sends record i - warmup.
class TraceWorkload : public Workload {
 public:
  TraceWorkload(std::vector<TraceRecord> records, std::string model, std::vector<int> token_pool,
                TokenCalibration calibration, int warmup, uint64_t seed, bool stream,
                SamplingOptions sampling);

  CompletionRequest request(int run_index, int request_index) const override;
  ApiKind kind() const override { return ApiKind::completions; }
  bool exact_lengths() const { return !token_pool_.empty(); }

  // The token ids of a record's prompt (with a token pool): block b of a record with hash h is
  // the first tokens of the block drawn from (seed, h), so equal hashes give equal blocks; tokens
  // past the hashed blocks are drawn from (seed, `unique_salt`).
  std::vector<int> prompt_ids(const TraceRecord& record, uint64_t unique_salt) const;
  // The same as filler text, without a token pool.
  std::string prompt_text(const TraceRecord& record, uint64_t unique_salt) const;

 private:
  std::vector<TraceRecord> records_;
  std::string model_;
  std::vector<int> token_pool_;
  TokenCalibration calibration_;
  int warmup_;
  uint64_t seed_;
  bool stream_;
  SamplingOptions sampling_;
};

// A trace's conversations (brisk bench --replay-sessions): the records that share a session id
// are the turns of one conversation, in arrival order; a record without one is a conversation of
// one turn. A turn starts no earlier than its (scaled) arrival, and no earlier than the previous
// turn's answer plus the think time the trace shows (its arrival minus the previous turn's
// arrival and E2E, scaled; none when the trace has no E2E). The first turn's message is the
// recorded prompt as filler text whose blocks repeat where its hashes do (`prompts`); a later
// turn's message is only what the recorded prompt grew by beyond the history (prompt tokens
// minus the previous turn's prompt and output), since the history is resent as this replay got it.
std::vector<SessionScript> trace_sessions(const TraceSchedule& schedule, double time_scale,
                                          const TraceWorkload& prompts);

// Ordinary words' token ids on the target's tokenizer (its POST /tokenize): the alphabet of a
// replay's prompts. Empty when the target cannot tokenize.
std::vector<int> replay_token_pool(const TargetEndpoint& target,
                                   const TokenCalibration& calibration,
                                   std::chrono::milliseconds timeout);

// result.json's "workload" for a replay.
nlohmann::json describe_trace_workload(const std::string& path, const Trace& trace,
                                       const TraceSchedule& schedule,
                                       const TraceReplayOptions& options, bool exact_lengths);

}  // namespace brisk::bench
