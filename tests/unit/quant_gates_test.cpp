#include <gtest/gtest.h>

#include "quant/gates.h"
#include "quant/quant_report.h"
#include "quant/verdict.h"

namespace brisk::quant {
namespace {

TEST(QuantGates, ParsesTheDefaults) {
  std::string error;
  const auto gates = parse_gates(kDefaultGates, &error);
  ASSERT_TRUE(gates) << error;
  ASSERT_EQ(gates->size(), 4u);
  EXPECT_EQ((*gates)[0].metric, "kld_mean");
  EXPECT_TRUE((*gates)[0].at_most);
  EXPECT_DOUBLE_EQ((*gates)[0].threshold, 0.05);
  EXPECT_EQ((*gates)[1].metric, "same_top");
  EXPECT_FALSE((*gates)[1].at_most);
  EXPECT_EQ((*gates)[3].text(), "format>=0.98");
}

TEST(QuantGates, BadGatesSayWhatIsWrong) {
  std::string error;
  EXPECT_FALSE(parse_gates("kld<=0.1", &error));
  EXPECT_NE(error.find("unknown metric 'kld'"), std::string::npos);
  EXPECT_NE(error.find("kld_mean"), std::string::npos) << "lists the known metrics";
  EXPECT_FALSE(parse_gates("kld_mean<0.1", &error));
  EXPECT_NE(error.find("METRIC<=VALUE"), std::string::npos);
  EXPECT_FALSE(parse_gates("kld_mean<=abc", &error));
  EXPECT_NE(error.find("not a number"), std::string::npos);
  EXPECT_FALSE(parse_gates("kld_mean<=0.1,kld_mean<=0.2", &error));
  EXPECT_FALSE(parse_gates(" , ", &error));
}

// An unmeasured figure used to pass its gate silently, so a candidate nobody could judge on a
// gate was shipped as if it had met it.
TEST(QuantGates, AnUnmeasuredFigureDoesNotPassAndIsReportedAsNotMeasured) {
  std::string error;
  const auto gates = parse_gates("kld_mean<=0.05,same_top>=0.9,format>=0.98", &error);
  const auto outcomes =
      apply_gates(*gates, {{"kld_mean", 0.06}, {"same_top", 0.95}, {"format", std::nullopt}});
  EXPECT_FALSE(outcomes[0].passed);
  EXPECT_TRUE(outcomes[0].measured());
  EXPECT_TRUE(outcomes[1].passed);
  EXPECT_FALSE(outcomes[2].passed);
  EXPECT_FALSE(outcomes[2].measured());
  // Absent from the figures altogether is unmeasured too.
  EXPECT_FALSE(apply_gates(*gates, {})[1].passed);
  // At the threshold itself a gate passes.
  EXPECT_TRUE(apply_gates(*gates, {{"kld_mean", 0.05}})[0].passed);
}

TEST(QuantGates, ACandidateWithAnUnmeasuredGateDoesNotPassAndTheVerdictSaysWhy) {
  std::string error;
  const auto gates = parse_gates("kld_mean<=0.05,format>=0.98,ppl_ratio<=1.1", &error);
  CandidateResult result;
  result.run.name = "q8";
  result.divergence.tokens = 10;
  result.divergence.kld_mean = 0.01;
  result.divergence.ppl_ratio = 1.0;
  judge_candidate(*gates, /*perplexity_measured=*/true, &result);
  EXPECT_FALSE(result.passed);
  EXPECT_TRUE(result.failed_gates.empty());
  EXPECT_EQ(result.unmeasured_gates, std::vector<std::string>{"format"});
  result.tasks.format_kept = 1.0;
  judge_candidate(*gates, /*perplexity_measured=*/false, &result);
  EXPECT_EQ(result.unmeasured_gates, std::vector<std::string>{"ppl_ratio"});
  judge_candidate(*gates, /*perplexity_measured=*/true, &result);
  EXPECT_TRUE(result.passed);
  result.divergence.tokens = 0;  // no position compared: no divergence figure at all
  judge_candidate(*gates, /*perplexity_measured=*/true, &result);
  EXPECT_EQ(result.unmeasured_gates, (std::vector<std::string>{"kld_mean", "ppl_ratio"}));
  const Verdict verdict = choose_candidate({}, {result}, "speed");
  EXPECT_FALSE(verdict.choice);
  EXPECT_NE(verdict.summary.find("could not be judged on kld_mean, ppl_ratio (not measured)"),
            std::string::npos)
      << verdict.summary;
}

CandidateResult candidate(const std::string& name, bool passed, double tokens_per_s,
                          uint64_t rss_bytes) {
  CandidateResult result;
  result.run.name = name;
  result.passed = passed;
  if (!passed) result.failed_gates = {"kld_mean"};
  result.run.speed.decode_tokens_per_s = tokens_per_s;
  result.run.memory.allocated_bytes = rss_bytes;
  result.run.memory.file_bytes = rss_bytes;
  return result;
}

TEST(QuantVerdict, FastestPassingOrSmallestWithPreferMemory) {
  ModelRun reference;
  reference.speed.decode_tokens_per_s = 50;
  reference.memory.allocated_bytes = 1000;
  reference.memory.file_bytes = 1000;
  const std::vector<CandidateResult> candidates = {candidate("q8", true, 60, 600),
                                                   candidate("q4", true, 80, 400),
                                                   candidate("q2", false, 90, 300)};
  const Verdict fastest = choose_candidate(reference, candidates, "speed");
  ASSERT_TRUE(fastest.choice);
  EXPECT_EQ(*fastest.choice, 1u);
  EXPECT_NE(fastest.summary.find("1.60x"), std::string::npos) << fastest.summary;
  EXPECT_NE(fastest.summary.find("60% less"), std::string::npos) << fastest.summary;
  const Verdict smallest = choose_candidate(reference, {candidates[0], candidates[2]}, "memory");
  ASSERT_TRUE(smallest.choice);
  EXPECT_EQ(*smallest.choice, 0u);  // q2 is smaller but fails
}

TEST(QuantVerdict, NonePassingKeepsTheReferenceAndNamesTheGate) {
  const Verdict verdict = choose_candidate({}, {candidate("q2", false, 90, 300)}, "speed");
  EXPECT_FALSE(verdict.choice);
  EXPECT_NE(verdict.summary.find("keep the reference"), std::string::npos);
  EXPECT_NE(verdict.summary.find("q2 failed kld_mean"), std::string::npos) << verdict.summary;
}

TEST(QuantVerdict, ASlowerChoiceIsCalledSlower) {
  ModelRun reference;
  reference.speed.decode_tokens_per_s = 100;
  const Verdict verdict = choose_candidate(reference, {candidate("q8", true, 90, 300)}, "speed");
  EXPECT_NE(verdict.summary.find("slower than the reference"), std::string::npos);
}

TEST(QuantReport, JsonHasTheDocumentedShape) {
  QuantReport report;
  report.reference.name = "ref";
  report.reference.file = "ref.gguf";
  std::string error;
  report.gates = *parse_gates(kDefaultGates, &error);
  report.candidates = {candidate("q8", true, 60, 600), candidate("q2", false, 90, 300)};
  report.candidates[0].divergence.kld_mean = 0.001;
  report.candidates[0].tasks.flips.push_back({"item", CheckKind::json, true});
  report.verdict = {0, "ship q8"};
  const nlohmann::json json = report_json(report);
  EXPECT_EQ(json["reference"]["file"], "ref.gguf");
  EXPECT_EQ(json["gates"]["kld_mean"]["op"], "<=");
  EXPECT_DOUBLE_EQ(json["gates"]["same_top"]["threshold"].get<double>(), 0.90);
  const nlohmann::json& first = json["candidates"][0];
  for (const char* key : {"name", "file", "passed", "failed_gates", "kld", "same_top", "ppl_ratio",
                          "tasks", "flips", "speed", "memory"}) {
    EXPECT_TRUE(first.contains(key)) << key;
  }
  for (const char* key : {"mean", "median", "p99"}) EXPECT_TRUE(first["kld"].contains(key)) << key;
  EXPECT_DOUBLE_EQ(first["kld"]["mean"].get<double>(), 0.001);
  EXPECT_EQ(first["flips"]["items"][0]["direction"], "lost");
  EXPECT_EQ(json["candidates"][1]["failed_gates"][0], "kld_mean");
  EXPECT_EQ(json["verdict"]["choice"], "q8");
  report.verdict = {std::nullopt, "keep the reference"};
  EXPECT_TRUE(report_json(report)["verdict"]["choice"].is_null());
}

}  // namespace
}  // namespace brisk::quant
