#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace brisk {

// One served request as a trace holds it: what brisk serve writes with --trace-out, what brisk
// bench --trace replays. docs/trace.md is the schema. A public trace (Mooncake, Azure) fills
// only arrival, lengths and (Mooncake) hash ids; the rest keeps its "unknown" value.
struct TraceRecord {
  double arrival_s = 0;  // offset from the trace's start (the first request of a public trace)
  std::string endpoint;  // "chat" or "completions"; empty: unknown
  std::string model;
  int input_tokens = 0;   // the prompt as the server counted it (after the chat template)
  int cached_tokens = -1; // of input_tokens, reused from a prefix cache; -1: unknown
  int output_tokens = 0;  // tokens generated
  std::optional<int> max_tokens;  // what the client asked for, when it named it
  std::string finish_reason;      // stop, length, cancelled, error, deadline; empty: unknown
  std::optional<int> priority;
  std::string session;            // the client's `user` field or X-Session-Id header
  std::optional<double> ttft_ms;  // as served
  std::optional<double> e2e_ms;
  // A hash per block of `block_tokens` prompt tokens, each chained to the one before, so two
  // prompts share their first k hashes exactly when they share their first k blocks. The last
  // block may be partial (Mooncake's convention).
  int block_tokens = 0;
  std::vector<uint64_t> hash_ids;
  std::string prompt;  // the prompt's text, only with --trace-text
};

enum class TraceFormat { automatic, brisk, mooncake, azure };

// "auto", "brisk", "mooncake", "azure"; nullopt otherwise.
std::optional<TraceFormat> parse_trace_format(const std::string& name);
const char* trace_format_name(TraceFormat format);

// Mooncake's published traces hash blocks of 512 tokens.
inline constexpr int kMooncakeBlockTokens = 512;
// brisk serve's default --trace-block-tokens.
inline constexpr int kDefaultTraceBlockTokens = 16;
// The most tokens a trace's count may hold (far past any model's context): a replay allocates
// its prompts, so a wild number is refused, not attempted.
inline constexpr int kMaxTraceTokens = 1 << 24;
// Hash values stay below 2^53, so every JSON reader (doubles, too) keeps them exact.
inline constexpr uint64_t kTraceHashMask = (uint64_t{1} << 53) - 1;

// The chained block hashes of `tokens`: one per `block_tokens` tokens, the last block partial.
std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> tokens, int block_tokens);

// One line of brisk's format (JSON, no newline).
std::string trace_line(const TraceRecord& record);

struct Trace {
  TraceFormat format = TraceFormat::brisk;  // the one it was read as
  std::vector<TraceRecord> records;         // in arrival order
};

// Reads a trace file in `format` (automatic: brisk's or Mooncake's JSONL by their fields, the
// Azure CSV by its header). Records come sorted by arrival; the first arrives at 0 for public
// traces (their timestamps are absolute). nullopt with `error` naming the line and the field.
std::optional<Trace> read_trace_file(const std::string& path, TraceFormat format,
                                     std::string& error);
// The same from text already in memory (`source` names it in errors).
std::optional<Trace> parse_trace(const std::string& text, TraceFormat format,
                                 const std::string& source, std::string& error);

// Of all prompt tokens of `records` (in arrival order), the fraction in each prompt's leading
// blocks whose hash an earlier request's prompt already had (up to its first unseen block; a
// partial last block counts its own tokens): what a prefix cache that forgot nothing could
// reuse. A record's tokens past its hashed blocks, or without hashes, count as unshared. nullopt when no record has block
// hashes (Azure's CSV: the sharing is unknown, not zero) or no record has a prompt token.
std::optional<double> prefix_sharing_ratio(const std::vector<TraceRecord>& records);

}  // namespace brisk
