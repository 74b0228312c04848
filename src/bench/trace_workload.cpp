#include "bench/trace_workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "bench/openai_client.h"

namespace brisk::bench {
namespace {

// One stream's seed from two numbers (a seed and a hash, say).
uint64_t mix(uint64_t a, uint64_t b) { return mix_bits(mix_bits(a) ^ b); }

constexpr uint64_t kTailStream = 0x7461696c;    // "tail": tokens past the hashed blocks
constexpr uint64_t kWarmupStream = 0x7761726d;  // "warm"
constexpr int kWarmupInputTokens = 16;
constexpr int kWarmupOutputTokens = 4;

// The tokens of one stream (a block's hash, or a request's own tail), `count` of them.
void append_drawn(std::vector<int>& out, const std::vector<int>& pool, uint64_t stream, int count) {
  std::mt19937_64 rng(stream);
  for (int i = 0; i < count; ++i) out.push_back(pool[rng() % pool.size()]);
}

// How many of a record's prompt tokens each hashed block covers, in order.
std::vector<int> block_lengths(const TraceRecord& record) {
  std::vector<int> lengths;
  int left = record.input_tokens;
  for (size_t b = 0; b < record.hash_ids.size() && left > 0 && record.block_tokens > 0; ++b) {
    lengths.push_back(std::min(left, record.block_tokens));
    left -= lengths.back();
  }
  return lengths;
}

}  // namespace

std::optional<TraceSchedule> schedule_trace(const Trace& trace, const TraceReplayOptions& options,
                                            std::string& error) {
  if (!(options.time_scale > 0) || !std::isfinite(options.time_scale)) {
    error = fmt::format("--time-scale must be a number > 0, got {}", options.time_scale);
    return std::nullopt;
  }
  if (options.max_duration_s && !(*options.max_duration_s > 0)) {
    error = fmt::format("--max-duration must be > 0 seconds, got {}", *options.max_duration_s);
    return std::nullopt;
  }
  TraceSchedule schedule;
  for (const TraceRecord& record : trace.records) {
    const double offset = record.arrival_s * options.time_scale;
    if (options.max_duration_s && offset >= *options.max_duration_s) break;  // sorted by arrival
    schedule.records.push_back(record);
    schedule.offsets_s.push_back(offset);
  }
  if (schedule.records.empty()) {
    error = "no request of the trace arrives within --max-duration";
    return std::nullopt;
  }
  return schedule;
}

TraceWorkload::TraceWorkload(std::vector<TraceRecord> records, std::string model,
                             std::vector<int> token_pool, TokenCalibration calibration, int warmup,
                             uint64_t seed, bool stream, SamplingOptions sampling)
    : records_(std::move(records)),
      model_(std::move(model)),
      token_pool_(std::move(token_pool)),
      calibration_(std::move(calibration)),
      warmup_(std::max(0, warmup)),
      seed_(seed),
      stream_(stream),
      sampling_(std::move(sampling)) {}

std::vector<int> TraceWorkload::prompt_ids(const TraceRecord& record, uint64_t unique_salt) const {
  std::vector<int> ids;
  ids.reserve(record.input_tokens);
  const std::vector<int> lengths = block_lengths(record);
  for (size_t b = 0; b < lengths.size(); ++b) {
    append_drawn(ids, token_pool_, mix(seed_, record.hash_ids[b]), lengths[b]);
  }
  append_drawn(ids, token_pool_, mix(mix(seed_, kTailStream), unique_salt),
               record.input_tokens - static_cast<int>(ids.size()));
  return ids;
}

std::string TraceWorkload::prompt_text(const TraceRecord& record, uint64_t unique_salt) const {
  const auto words = [&](int tokens) {
    return std::max(0, static_cast<int>(std::lround(tokens / calibration_.tokens_per_word)));
  };
  std::string text;
  int covered = 0;
  const std::vector<int> lengths = block_lengths(record);
  for (size_t b = 0; b < lengths.size(); ++b) {
    text += filler_text(mix(seed_, record.hash_ids[b]), words(lengths[b]));
    covered += lengths[b];
  }
  text +=
      filler_text(mix(mix(seed_, kTailStream), unique_salt), words(record.input_tokens - covered));
  return text;
}

CompletionRequest TraceWorkload::request(int /*run_index*/, int request_index) const {
  TraceRecord record;
  uint64_t salt = 0;
  if (request_index < warmup_) {
    // Short and shared with nothing: they warm the connections and the server, not its cache.
    record.input_tokens = kWarmupInputTokens;
    record.output_tokens = kWarmupOutputTokens;
    salt = mix(kWarmupStream, static_cast<uint64_t>(request_index));
  } else {
    record = records_.at(static_cast<size_t>(request_index - warmup_) % records_.size());
    salt = static_cast<uint64_t>(request_index - warmup_);
  }
  // A recorded request that ended before its first token still asks for one.
  const int max_tokens = std::max(1, record.output_tokens);
  CompletionRequest request;
  request.route = "/v1/completions";
  request.stream = stream_;
  request.body = exact_lengths() ? build_token_prompt_body(model_, prompt_ids(record, salt),
                                                           max_tokens, stream_, sampling_)
                                 : build_completion_body(ApiKind::completions, model_,
                                                         prompt_text(record, salt), max_tokens,
                                                         stream_, sampling_);
  return request;
}

std::vector<SessionScript> trace_sessions(const TraceSchedule& schedule, double time_scale,
                                          const TraceWorkload& prompts) {
  std::vector<SessionScript> scripts;
  std::map<std::string, size_t> by_session;  // a session id's script
  std::vector<const TraceRecord*> previous;  // each script's last turn's record
  for (size_t i = 0; i < schedule.records.size(); ++i) {
    const TraceRecord& record = schedule.records[i];
    size_t index = scripts.size();
    if (!record.session.empty()) {
      const auto [it, added] = by_session.emplace(record.session, scripts.size());
      index = it->second;
    }
    if (index == scripts.size()) {
      SessionScript script;
      script.user = record.session.empty() ? fmt::format("brisk-replay-{}", i) : record.session;
      scripts.push_back(std::move(script));
      previous.push_back(nullptr);
    }
    SessionTurn turn;
    turn.not_before_s = schedule.offsets_s[i];
    turn.output_tokens = std::max(1, record.output_tokens);
    const TraceRecord* before = previous[index];
    if (before == nullptr) {
      turn.user_text = prompts.prompt_text(record, i);
    } else {
      if (before->e2e_ms) {
        turn.think_s = std::max(0.0, record.arrival_s - before->arrival_s - *before->e2e_ms / 1e3) *
                       time_scale;
      }
      TraceRecord added;  // only the new message: the history is resent as this replay got it
      added.input_tokens =
          std::max(1, record.input_tokens - before->input_tokens - before->output_tokens);
      turn.user_text = prompts.prompt_text(added, i);
    }
    previous[index] = &record;
    scripts[index].turns.push_back(std::move(turn));
  }
  return scripts;
}

std::vector<int> replay_token_pool(const TargetEndpoint& target,
                                   const TokenCalibration& calibration,
                                   std::chrono::milliseconds timeout) {
  if (!calibration.measured()) return {};
  const auto ids = tokenize(target, calibration, all_filler_words(), false, timeout);
  if (!ids) return {};
  std::set<int> unique(ids->begin(), ids->end());
  return {unique.begin(), unique.end()};
}

nlohmann::json describe_trace_workload(const std::string& path, const Trace& trace,
                                       const TraceSchedule& schedule,
                                       const TraceReplayOptions& options, bool exact_lengths) {
  long long input = 0, output = 0;
  for (const TraceRecord& record : schedule.records) {
    input += record.input_tokens;
    output += record.output_tokens;
  }
  const double n = static_cast<double>(schedule.records.size());
  return {{"source", "trace"},
          {"trace", path},
          {"trace_format", trace_format_name(trace.format)},
          {"trace_requests", trace.records.size()},
          {"replayed_requests", schedule.records.size()},
          {"time_scale", options.time_scale},
          {"max_duration_s", options.max_duration_s ? nlohmann::json(*options.max_duration_s)
                                                    : nlohmann::json(nullptr)},
          {"span_s", schedule.offsets_s.back()},
          {"input_tokens_mean", input / n},
          {"output_tokens_mean", output / n},
          {"prompt", exact_lengths ? "token ids (exact lengths)"
                                   : "filler words (approximate lengths: the server has no "
                                     "/tokenize)"}};
}

}  // namespace brisk::bench
