// brisk bench's chat sessions (--sessions, --replay-sessions): think times, the scripts of
// synthetic and replayed conversations, and the history each turn resends.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/chat_session.h"
#include "bench/trace_workload.h"

namespace brisk::bench {
namespace {

using json = nlohmann::json;

ThinkTime think(const std::string& spec) {
  std::string error;
  const auto parsed = parse_think_time(spec, error);
  EXPECT_TRUE(parsed) << spec << ": " << error;
  return parsed.value_or(ThinkTime{});
}

TEST(ThinkTime, ParsesItsThreeShapesAndRefusesTheRestWithAnExample) {
  EXPECT_EQ(think("2.5").spec(), "2.5");
  EXPECT_EQ(think("0").spec(), "0");
  EXPECT_EQ(think("uniform:1:5").spec(), "uniform:1:5");
  EXPECT_EQ(think("exponential:3").spec(), "exponential:3");
  for (const char* bad : {"", "-1", "uniform:5:1", "uniform:1", "exponential", "exponential:1:2",
                          "gamma:2", "2s", "nan", "inf", "uniform:1:x"}) {
    std::string error;
    EXPECT_FALSE(parse_think_time(bad, error)) << bad;
    EXPECT_NE(error.find("exponential:MEAN"), std::string::npos) << bad << ": " << error;
  }
}

TEST(ThinkTime, SamplesFollowTheirShapeAndTheKey) {
  EXPECT_EQ(think("2").sample_s(1), 2);
  const ThinkTime uniform = think("uniform:1:3");
  const ThinkTime exponential = think("exponential:2");
  double uniform_sum = 0, exponential_sum = 0;
  const int n = 20000;
  for (int key = 0; key < n; ++key) {
    const double u = uniform.sample_s(key);
    EXPECT_GE(u, 1);
    EXPECT_LE(u, 3);
    uniform_sum += u;
    const double e = exponential.sample_s(key);
    EXPECT_GE(e, 0);
    exponential_sum += e;
    EXPECT_EQ(e, exponential.sample_s(key));  // the same key, the same time
  }
  EXPECT_NEAR(uniform_sum / n, 2, 0.05);
  EXPECT_NEAR(exponential_sum / n, 2, 0.08);
}

TEST(SyntheticSessions, StaggerFirstTurnsAndShareNoFirstLine) {
  SessionSpec spec;
  spec.sessions = 4;
  spec.turns = 3;
  spec.think = think("2");
  spec.user_tokens = LengthDistribution::fixed_at(64);
  spec.output_tokens = LengthDistribution::fixed_at(16);
  spec.seed = 7;
  TokenCalibration calibration;
  calibration.tokens_per_word = 1.0;
  calibration.header_tokens = 12;
  const auto scripts = synthetic_sessions(spec, calibration, /*run_index=*/1);
  ASSERT_EQ(scripts.size(), 4u);
  std::set<std::string> users, first_texts;
  for (size_t s = 0; s < scripts.size(); ++s) {
    const SessionScript& script = scripts[s];
    users.insert(script.user);
    ASSERT_EQ(script.turns.size(), 3u);
    // Spread over one mean think time: 0, 0.5, 1, 1.5 s.
    EXPECT_DOUBLE_EQ(script.turns[0].not_before_s, 0.5 * s);
    EXPECT_EQ(script.turns[0].think_s, 0);
    first_texts.insert(script.turns[0].user_text.substr(0, 40));
    for (size_t t = 1; t < 3; ++t) {
      EXPECT_EQ(script.turns[t].think_s, 2);
      EXPECT_EQ(script.turns[t].not_before_s, 0);
      // One filler word per token at this calibration: 64 words, each after a space.
      const std::string& text = script.turns[t].user_text;
      EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 64) << text;
    }
    EXPECT_EQ(script.turns[1].output_tokens, 16);
  }
  EXPECT_EQ(users.size(), 4u);
  EXPECT_EQ(first_texts.size(), 4u);
  // The same spec and run give the same scripts; another run, other texts.
  EXPECT_EQ(synthetic_sessions(spec, calibration, 1)[2].turns[1].user_text,
            scripts[2].turns[1].user_text);
  EXPECT_NE(synthetic_sessions(spec, calibration, 2)[2].turns[1].user_text,
            scripts[2].turns[1].user_text);
}

TEST(SyntheticSessions, ASystemPromptOfItsOwnOpensEachConversation) {
  SessionSpec spec;
  spec.sessions = 2;
  spec.turns = 2;
  spec.system_tokens = 112;
  spec.user_tokens = LengthDistribution::fixed_at(20);
  TokenCalibration calibration;
  calibration.tokens_per_word = 1.0;
  calibration.header_tokens = 12;
  const auto scripts = synthetic_sessions(spec, calibration, 0);
  ASSERT_EQ(scripts.size(), 2u);
  for (const SessionScript& script : scripts) {
    // The unique line, then 100 filler words; the first user message is all filler.
    EXPECT_EQ(script.system_text.rfind("Conversation ", 0), 0u) << script.system_text;
    const std::string filler = script.system_text.substr(script.system_text.find('.') + 1);
    EXPECT_EQ(std::count(filler.begin(), filler.end(), ' '), 100);
    EXPECT_EQ(std::count(script.turns[0].user_text.begin(), script.turns[0].user_text.end(), ' '),
              20);
  }
  EXPECT_NE(scripts[0].system_text, scripts[1].system_text);
  Conversation chat(ApiKind::chat);
  chat.add_system(scripts[0].system_text);
  chat.add_user("hi");
  const json body = json::parse(chat.request("m", "u", 4, true, SamplingOptions{}).body);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][1]["role"], "user");
}

TEST(Conversation, ChatResendsEveryMessageAndTheAnswersInOrder) {
  Conversation chat(ApiKind::chat);
  chat.add_user("first question");
  chat.add_answer("first answer");
  chat.add_user("second question");
  const CompletionRequest request = chat.request("m", "alice", 32, true, SamplingOptions{});
  EXPECT_EQ(request.route, "/v1/chat/completions");
  const json body = json::parse(request.body);
  EXPECT_EQ(body["user"], "alice");
  EXPECT_EQ(body["max_tokens"], 32);
  EXPECT_EQ(body["messages"], json::parse(R"([
      {"role": "user", "content": "first question"},
      {"role": "assistant", "content": "first answer"},
      {"role": "user", "content": "second question"}])"));
}

TEST(Conversation, CompletionsConcatenateTheTurns) {
  Conversation plain(ApiKind::completions);
  plain.add_user("Q1.");
  plain.add_answer(" A1.");
  plain.add_user(" Q2.");
  const json body = json::parse(plain.request("m", "bob", 8, false, SamplingOptions{}).body);
  EXPECT_EQ(body["prompt"], "Q1. A1. Q2.");
  EXPECT_EQ(body["user"], "bob");
  EXPECT_FALSE(body.contains("messages"));
}

TraceRecord turn_record(double arrival_s, const std::string& session, int input, int output,
                        std::optional<double> e2e_ms) {
  TraceRecord record;
  record.arrival_s = arrival_s;
  record.session = session;
  record.input_tokens = input;
  record.output_tokens = output;
  record.e2e_ms = e2e_ms;
  return record;
}

TEST(TraceSessions, GroupTurnsBySessionWithTheirThinkTimeAndOnlyTheNewMessage) {
  Trace trace;
  trace.records = {turn_record(0.0, "a", 100, 20, 1000), turn_record(0.5, "", 50, 5, 100),
                   turn_record(3.0, "a", 150, 10, 500), turn_record(3.2, "b", 40, 4, std::nullopt),
                   turn_record(4.0, "b", 60, 4, std::nullopt)};
  std::string error;
  const auto schedule = schedule_trace(trace, {2.0, std::nullopt}, error);
  ASSERT_TRUE(schedule) << error;
  TokenCalibration calibration;
  calibration.tokens_per_word = 1.0;
  const TraceWorkload prompts(schedule->records, "m", {}, calibration, 0, 1, true, {});
  const auto scripts = trace_sessions(*schedule, 2.0, prompts);
  ASSERT_EQ(scripts.size(), 3u);  // a, the one without a session, b
  EXPECT_EQ(scripts[0].user, "a");
  ASSERT_EQ(scripts[0].turns.size(), 2u);
  EXPECT_EQ(scripts[1].turns.size(), 1u);
  EXPECT_EQ(scripts[2].user, "b");
  ASSERT_EQ(scripts[2].turns.size(), 2u);
  // Arrivals scaled by 2; turn 2 of a: read for (3.0 - 0.0 - 1.0) s, times 2.
  EXPECT_DOUBLE_EQ(scripts[0].turns[1].not_before_s, 6.0);
  EXPECT_DOUBLE_EQ(scripts[0].turns[1].think_s, 4.0);
  EXPECT_EQ(scripts[0].turns[1].output_tokens, 10);
  // No E2E in the trace: no think time, the arrival alone paces the turn.
  EXPECT_DOUBLE_EQ(scripts[2].turns[1].think_s, 0);
  EXPECT_DOUBLE_EQ(scripts[2].turns[1].not_before_s, 8.0);
  // The first message is the whole prompt; a later one what the prompt grew by (150 - 100 -
  // 20 = 30 tokens: 30 words at one token per word), and at least one token.
  const auto words = [](const std::string& text) {
    return std::count(text.begin(), text.end(), ' ');
  };
  EXPECT_EQ(words(scripts[0].turns[0].user_text), 100);
  EXPECT_EQ(words(scripts[0].turns[1].user_text), 30);
  EXPECT_EQ(words(scripts[2].turns[1].user_text), 16);  // 60 - 40 - 4
}

}  // namespace
}  // namespace brisk::bench
