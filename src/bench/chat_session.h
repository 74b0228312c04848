#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/length_distribution.h"
#include "bench/openai_client.h"
#include "bench/sampling_options.h"
#include "bench/workload.h"

namespace brisk::bench {

// Chat-UI traffic (brisk bench --sessions, --replay-sessions): conversations whose every turn
// resends the whole history, the server's own answers included, after the user has read the
// last answer. A server's prefix cache meets exactly what a chat front end makes it meet.

// How long a user reads before the next turn, in seconds: "2" (fixed), "uniform:1:5" or
// "exponential:3" (mean 3 s). The same key always gives the same time, on every platform.
struct ThinkTime {
  enum class Kind { fixed, uniform, exponential };
  Kind kind = Kind::fixed;
  double a = 1;  // fixed: the time; uniform: shortest; exponential: mean
  double b = 0;  // uniform: longest

  double sample_s(uint64_t key) const;
  double mean_s() const { return kind == Kind::uniform ? (a + b) / 2 : a; }
  std::string spec() const;
};
std::optional<ThinkTime> parse_think_time(const std::string& spec, std::string& error);

// One turn of a scripted conversation: it starts once the previous turn's answer has been read
// for `think_s`, and never before `not_before_s` (from the start of the measured phase).
struct SessionTurn {
  double not_before_s = 0;
  double think_s = 0;
  std::string user_text;  // the new user message
  int output_tokens = 0;  // asked for exactly (max_tokens with ignore_eos)
};

struct SessionScript {
  // Sent as the request's `user` field, as an OpenAI client tells a service who is asking; a
  // server that records traces (brisk serve --trace-out) keeps the conversation together.
  std::string user;
  std::string system_text;  // the conversation's system prompt; empty: none
  std::vector<SessionTurn> turns;
};

struct SessionSpec {
  int sessions = 8;
  int turns = 4;
  ThinkTime think;
  LengthDistribution user_tokens = LengthDistribution::fixed_at(128);  // each new user message
  LengthDistribution output_tokens = LengthDistribution::fixed_at(128);
  int system_tokens = 0;  // a system prompt of its own per conversation (0: none)
  uint64_t seed = 0;
};

// `spec.sessions` conversations of `spec.turns` turns. Their first turns are spread evenly over
// one mean think time (a chat service's users do not all press enter at once); each
// conversation's first message (its system prompt, when `system_tokens` > 0) starts with a line
// unique to (seed, run, session), so conversations share nothing and only a conversation's own
// history can come from a cache.
std::vector<SessionScript> synthetic_sessions(const SessionSpec& spec,
                                              const TokenCalibration& calibration, int run_index);

// The history of one conversation and the body of its next request: /v1/chat/completions gets
// the messages; /v1/completions the turns' texts one after the other.
class Conversation {
 public:
  explicit Conversation(ApiKind kind) : kind_(kind) {}
  void add_system(const std::string& text);
  void add_user(const std::string& text);
  void add_answer(const std::string& text);
  CompletionRequest request(const std::string& model, const std::string& user, int max_tokens,
                            bool stream, const SamplingOptions& sampling) const;

 private:
  ApiKind kind_;
  nlohmann::json messages_ = nlohmann::json::array();
  std::string prompt_;
};

// What a session run sends besides the scripts.
struct SessionRequestOptions {
  ApiKind kind = ApiKind::chat;
  std::string model;
  bool stream = true;
  SamplingOptions sampling;
};

// result.json's "workload" for a synthetic session run.
nlohmann::json describe_sessions(const SessionSpec& spec, ApiKind kind);

}  // namespace brisk::bench
