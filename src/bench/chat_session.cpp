#include "bench/chat_session.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace brisk::bench {

using json = nlohmann::json;

namespace {

// Independent streams of one seed: think times, message lengths, output lengths, words.
constexpr uint64_t kThinkStream = 0x7468696e6b;  // "think"
constexpr uint64_t kUserStream = 0x75736572;     // "user"
constexpr uint64_t kOutputStream = 0x6f7574;     // "out"
constexpr uint64_t kWordStream = 0x776f7264;     // "word"
constexpr uint64_t kSystemStream = 0x737973;     // "sys"

uint64_t key_of(uint64_t seed, uint64_t stream, int run, int session, int turn) {
  uint64_t key = mix_bits(seed ^ stream);
  for (const int part : {run, session, turn}) key = mix_bits(key ^ static_cast<uint64_t>(part));
  return key;
}

std::optional<double> parse_seconds(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !(value >= 0) ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// `words` filler words for a message of about `tokens` tokens on the target's tokenizer.
int words_for(int tokens, const TokenCalibration& calibration) {
  return std::max(1, static_cast<int>(std::lround(tokens / calibration.tokens_per_word)));
}

}  // namespace

double ThinkTime::sample_s(uint64_t key) const {
  switch (kind) {
    case Kind::fixed:
      return a;
    case Kind::uniform:
      return a + unit_interval(mix_bits(key)) * (b - a);
    case Kind::exponential:
      return -a * std::log(1.0 - unit_interval(mix_bits(key)));  // 1 - u is in (0, 1]
  }
  return a;
}

std::string ThinkTime::spec() const {
  switch (kind) {
    case Kind::fixed:
      return fmt::format("{:g}", a);
    case Kind::uniform:
      return fmt::format("uniform:{:g}:{:g}", a, b);
    case Kind::exponential:
      return fmt::format("exponential:{:g}", a);
  }
  return "";
}

std::optional<ThinkTime> parse_think_time(const std::string& spec, std::string& error) {
  const size_t colon = spec.find(':');
  const std::string_view kind = colon == std::string::npos
                                    ? std::string_view("fixed")
                                    : std::string_view(spec).substr(0, colon);
  std::vector<double> seconds;  // the numbers after the kind, while they parse
  std::string_view rest = colon == std::string::npos ? std::string_view(spec)
                                                     : std::string_view(spec).substr(colon + 1);
  while (true) {
    const size_t next = rest.find(':');
    const auto value = parse_seconds(rest.substr(0, next));
    if (!value) {
      seconds.push_back(-1);  // marks the spec invalid
      break;
    }
    seconds.push_back(*value);
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  const bool valid = seconds.back() >= 0;
  if (valid && kind == "fixed" && seconds.size() == 1) {
    return ThinkTime{ThinkTime::Kind::fixed, seconds[0], 0};
  }
  if (valid && kind == "uniform" && seconds.size() == 2 && seconds[0] <= seconds[1]) {
    return ThinkTime{ThinkTime::Kind::uniform, seconds[0], seconds[1]};
  }
  if (valid && kind == "exponential" && seconds.size() == 1) {
    return ThinkTime{ThinkTime::Kind::exponential, seconds[0], 0};
  }
  error = fmt::format(
      "'{}' is not a think time: use seconds >= 0 (2), uniform:MIN:MAX (uniform:1:5) or "
      "exponential:MEAN (exponential:3)",
      spec);
  return std::nullopt;
}

std::vector<SessionScript> synthetic_sessions(const SessionSpec& spec,
                                              const TokenCalibration& calibration, int run_index) {
  std::vector<SessionScript> scripts;
  const double stagger_s = spec.think.mean_s() / std::max(1, spec.sessions);
  for (int s = 0; s < spec.sessions; ++s) {
    SessionScript script;
    script.user = fmt::format("brisk-bench-{}-{}-{}", spec.seed, run_index, s);
    const std::string unique_line =
        fmt::format("Conversation {} of run {} (seed {}).", s, run_index, spec.seed);
    if (spec.system_tokens > 0) {
      script.system_text =
          unique_line +
          filler_text(
              key_of(spec.seed, kSystemStream, run_index, s, 0),
              words_for(std::max(1, spec.system_tokens - calibration.header_tokens), calibration));
    }
    for (int t = 0; t < spec.turns; ++t) {
      SessionTurn turn;
      turn.not_before_s = t == 0 ? s * stagger_s : 0;
      turn.think_s =
          t == 0 ? 0 : spec.think.sample_s(key_of(spec.seed, kThinkStream, run_index, s, t));
      int tokens = spec.user_tokens.sample(key_of(spec.seed, kUserStream, run_index, s, t));
      if (t == 0 && script.system_text.empty()) {
        // The unique line: no two conversations share a first block.
        turn.user_text = unique_line;
        tokens = std::max(1, tokens - calibration.header_tokens);
      }
      turn.user_text += filler_text(key_of(spec.seed, kWordStream, run_index, s, t),
                                    words_for(tokens, calibration));
      turn.output_tokens =
          spec.output_tokens.sample(key_of(spec.seed, kOutputStream, run_index, s, t));
      script.turns.push_back(std::move(turn));
    }
    scripts.push_back(std::move(script));
  }
  return scripts;
}

void Conversation::add_system(const std::string& text) {
  if (kind_ == ApiKind::chat) {
    messages_.push_back({{"role", "system"}, {"content", text}});
  } else {
    prompt_ += text;
  }
}

void Conversation::add_user(const std::string& text) {
  if (kind_ == ApiKind::chat) {
    messages_.push_back({{"role", "user"}, {"content", text}});
  } else {
    prompt_ += text;
  }
}

void Conversation::add_answer(const std::string& text) {
  if (kind_ == ApiKind::chat) {
    messages_.push_back({{"role", "assistant"}, {"content", text}});
  } else {
    prompt_ += text;
  }
}

CompletionRequest Conversation::request(const std::string& model, const std::string& user,
                                        int max_tokens, bool stream,
                                        const SamplingOptions& sampling) const {
  CompletionRequest request;
  request.stream = stream;
  request.route = completion_route(kind_);
  json body =
      json::parse(kind_ == ApiKind::chat
                      ? build_messages_body(model, messages_, max_tokens, stream, sampling)
                      : build_completion_body(kind_, model, prompt_, max_tokens, stream, sampling));
  body["user"] = user;
  request.body = body.dump();
  return request;
}

json describe_sessions(const SessionSpec& spec, ApiKind kind) {
  return {{"source", "sessions"},
          {"endpoint", kind == ApiKind::chat ? "chat" : "completions"},
          {"sessions", spec.sessions},
          {"turns", spec.turns},
          {"think_time_s", spec.think.spec()},
          {"system_tokens", spec.system_tokens},
          {"input_tokens", spec.user_tokens.mean()},
          {"input_tokens_dist", spec.user_tokens.spec()},
          {"output_tokens", spec.output_tokens.mean()},
          {"output_tokens_dist", spec.output_tokens.spec()},
          {"seed", spec.seed}};
}

}  // namespace brisk::bench
