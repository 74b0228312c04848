#include <gtest/gtest.h>

#include <cmath>

#include "quant/continuation_alignment.h"
#include "quant/top_logprobs.h"

namespace brisk::quant {
namespace {

// A generated token with its listed alternatives given as probabilities.
TokenWithLogprobs token(const std::string& text,
                        const std::vector<std::pair<std::string, double>>& top) {
  TokenWithLogprobs generated{text, 0, {}};
  for (const auto& [alternative, probability] : top) {
    generated.top.push_back({alternative, std::log(probability)});
    if (alternative == text) generated.logprob = std::log(probability);
  }
  return generated;
}

TEST(QuantTopLogprobs, IdenticalListsDivergeByExactlyZero) {
  const TokenWithLogprobs listed = token("A", {{"A", 0.6}, {"B", 0.3}, {"C", 0.05}});
  const TokenDivergence divergence = approximate_next_token_divergence(listed, listed);
  EXPECT_EQ(divergence.kld, 0.0);
  EXPECT_TRUE(divergence.same_top);
}

TEST(QuantTopLogprobs, MatchesAHandComputedCase) {
  // R = {A: .6, B: .3}, other .1. The candidate lists A: .5 and C: .3, leaving .2 unlisted;
  // B is the one token of R it does not list, so B gets min(.2 / 1, .3) = .2, and the
  // candidate's "other" is 1 - (.5 + .2) = .3.
  const TokenDivergence divergence = approximate_next_token_divergence(
      token("A", {{"A", 0.6}, {"B", 0.3}}), token("A", {{"A", 0.5}, {"C", 0.3}}));
  const double expected =
      0.6 * std::log(0.6 / 0.5) + 0.3 * std::log(0.3 / 0.2) + 0.1 * std::log(0.1 / 0.3);
  EXPECT_NEAR(divergence.kld, expected, 1e-12);
  EXPECT_NEAR(divergence.kld, 0.1211712, 1e-6);
  EXPECT_TRUE(divergence.same_top);
}

TEST(QuantTopLogprobs, AMissingTokenIsNoMoreLikelyThanTheLeastLikelyListedOne) {
  // The candidate leaves .45 unlisted, but B cannot be above C's .05, or it would be listed.
  const TokenDivergence divergence = approximate_next_token_divergence(
      token("A", {{"A", 0.6}, {"B", 0.3}}), token("A", {{"A", 0.5}, {"C", 0.05}}));
  const double expected =
      0.6 * std::log(0.6 / 0.5) + 0.3 * std::log(0.3 / 0.05) + 0.1 * std::log(0.1 / 0.45);
  EXPECT_NEAR(divergence.kld, expected, 1e-12);
}

TEST(QuantTopLogprobs, ADifferentTopTokenIsNotTheSameTopAndDivergesMore) {
  const auto reference = token("A", {{"A", 0.6}, {"B", 0.3}});
  const TokenDivergence close =
      approximate_next_token_divergence(reference, token("A", {{"A", 0.55}, {"B", 0.35}}));
  const TokenDivergence far =
      approximate_next_token_divergence(reference, token("B", {{"B", 0.7}, {"A", 0.2}}));
  EXPECT_TRUE(close.same_top);
  EXPECT_FALSE(far.same_top);
  EXPECT_GT(close.kld, 0);
  EXPECT_GT(far.kld, 10 * close.kld);
}

TEST(QuantTopLogprobs, ReadsTheChatShape) {
  std::string error;
  const auto answer = parse_logprobs_answer(R"({"choices":[{"message":{"content":"Paris."},
      "logprobs":{"content":[
        {"token":"Paris","logprob":-0.1,"bytes":[80],"top_logprobs":[
          {"token":"Paris","logprob":-0.1},{"token":"Lyon","logprob":-2.5}]},
        {"token":".","logprob":-0.3,"top_logprobs":[{"token":".","logprob":-0.3}]}]}}]})",
                                            &error);
  ASSERT_TRUE(answer) << error;
  EXPECT_EQ(answer->text, "Paris.");
  ASSERT_EQ(answer->tokens.size(), 2u);
  EXPECT_EQ(answer->tokens[0].token, "Paris");
  EXPECT_DOUBLE_EQ(answer->tokens[0].logprob, -0.1);
  ASSERT_EQ(answer->tokens[0].top.size(), 2u);
  EXPECT_EQ(answer->tokens[0].top[1].token, "Lyon");
  EXPECT_DOUBLE_EQ(answer->tokens[0].top[1].logprob, -2.5);
}

TEST(QuantTopLogprobs, ReadsTheLegacyCompletionsShapeMostLikelyFirst) {
  std::string error;
  const auto answer = parse_logprobs_answer(R"({"choices":[{"text":" Paris","logprobs":{
      "tokens":[" Par","is"],"token_logprobs":[-0.2,-0.01],
      "top_logprobs":[{" Lyon":-3.0," Par":-0.2," Nice":-2.0},{"is":-0.01}],
      "text_offset":[0,4]}}]})",
                                            &error);
  ASSERT_TRUE(answer) << error;
  EXPECT_EQ(answer->text, " Paris");
  ASSERT_EQ(answer->tokens.size(), 2u);
  EXPECT_EQ(answer->tokens[1].token, "is");
  ASSERT_EQ(answer->tokens[0].top.size(), 3u);
  EXPECT_EQ(answer->tokens[0].top[0].token, " Par");
  EXPECT_EQ(answer->tokens[0].top[1].token, " Nice");
  EXPECT_EQ(answer->tokens[0].top[2].token, " Lyon");
}

TEST(QuantTopLogprobs, AResponseWithoutLogprobsSaysSo) {
  std::string error;
  EXPECT_FALSE(parse_logprobs_answer(R"({"choices":[{"text":"x","logprobs":null}]})", &error));
  EXPECT_NE(error.find("no logprobs"), std::string::npos) << error;
  EXPECT_FALSE(parse_logprobs_answer(R"({"choices":[]})", &error));
  EXPECT_NE(error.find("no choices"), std::string::npos) << error;
  EXPECT_FALSE(parse_logprobs_answer("not json", &error));
  EXPECT_FALSE(parse_logprobs_answer(
      R"({"choices":[{"logprobs":{"content":[{"token":"a","logprob":"high"}]}}]})", &error));
  EXPECT_FALSE(parse_logprobs_answer(
      R"({"choices":[{"logprobs":{"tokens":["a"],"token_logprobs":[]}}]})", &error));
}

std::vector<TokenWithLogprobs> tokens(const std::vector<std::string>& texts) {
  std::vector<TokenWithLogprobs> result;
  for (const std::string& text : texts) result.push_back({text, 0, {}});
  return result;
}

TEST(QuantContinuationAlignment, SameAnswersAreComparedThroughout) {
  const auto alignment = align_continuations(tokens({"a", "b", "c"}), tokens({"a", "b", "c"}));
  EXPECT_EQ(alignment.compared_positions, 3u);
  EXPECT_FALSE(alignment.diverged_at);
}

TEST(QuantContinuationAlignment, TheFirstDifferingPositionIsComparedAndNothingAfterIt) {
  const auto alignment =
      align_continuations(tokens({"a", "b", "c", "d"}), tokens({"a", "b", "x", "d"}));
  EXPECT_EQ(alignment.compared_positions, 3u);
  EXPECT_EQ(alignment.diverged_at, 2u);
  const auto at_once = align_continuations(tokens({"a", "b"}), tokens({"x", "b"}));
  EXPECT_EQ(at_once.compared_positions, 1u);
  EXPECT_EQ(at_once.diverged_at, 0u);
}

TEST(QuantContinuationAlignment, AnAnswerThatStopsEarlierEndsTheComparison) {
  const auto alignment = align_continuations(tokens({"a", "b"}), tokens({"a", "b", "c"}));
  EXPECT_EQ(alignment.compared_positions, 2u);
  EXPECT_EQ(alignment.diverged_at, 2u);
  EXPECT_EQ(align_continuations({}, tokens({"a"})).compared_positions, 0u);
}

}  // namespace
}  // namespace brisk::quant
