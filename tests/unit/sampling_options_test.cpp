#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/dataset_workload.h"
#include "bench/openai_client.h"
#include "bench/result_comparison.h"
#include "bench/sampling_options.h"
#include "bench/workload.h"

namespace brisk::bench {
namespace {

using json = nlohmann::json;

std::set<std::string> keys_of(const json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

const std::set<std::string> kGeneratedKeys = {"model", "max_tokens", "stream", "stream_options",
                                              "ignore_eos"};

std::set<std::string> generated_plus(std::set<std::string> more) {
  more.insert(kGeneratedKeys.begin(), kGeneratedKeys.end());
  return more;
}

SamplingOptions completed(SamplingOptions sampling, const std::string& extra_body) {
  std::string error;
  auto result = complete_sampling_options(std::move(sampling), extra_body, error);
  EXPECT_TRUE(result) << error;
  return result.value_or(SamplingOptions{});
}

std::string refusal(SamplingOptions sampling, const std::string& extra_body) {
  std::string error;
  EXPECT_FALSE(complete_sampling_options(std::move(sampling), extra_body, error)) << extra_body;
  EXPECT_FALSE(error.empty());
  return error;
}

TEST(RequestBody, WithoutSamplingFlagsSendsNoSamplingKeyAtAll) {
  const SamplingOptions none = completed({}, "");
  EXPECT_EQ(none.sent_sampling(), json::object());
  const json completion =
      json::parse(build_completion_body(ApiKind::completions, "m", "p", 8, true, none));
  EXPECT_EQ(keys_of(completion), generated_plus({"prompt"}));
  const json chat = json::parse(build_completion_body(ApiKind::chat, "m", "p", 8, true, none));
  EXPECT_EQ(keys_of(chat), generated_plus({"messages"}));
  const json whole = json::parse(build_completion_body(ApiKind::completions, "m", "p", 8, false,
                                                       none));  // no stream_options either
  EXPECT_EQ(keys_of(whole),
            (std::set<std::string>{"model", "max_tokens", "stream", "ignore_eos", "prompt"}));
}

TEST(RequestBody, CarriesExactlyTheSamplingFlagsGiven) {
  SamplingOptions sampling;
  sampling.temperature = 0.8;
  sampling.top_k = 40;
  sampling = completed(sampling, "");
  EXPECT_EQ(sampling.sent_sampling(), json({{"temperature", 0.8}, {"top_k", 40}}));
  const json body =
      json::parse(build_completion_body(ApiKind::completions, "m", "p", 8, true, sampling));
  EXPECT_EQ(keys_of(body), generated_plus({"prompt", "temperature", "top_k"}));
  EXPECT_EQ(body["temperature"], 0.8);
  EXPECT_EQ(body["top_k"], 40);

  sampling = {};
  sampling.temperature = 0;  // greedy is a value like any other: sent, not dropped
  sampling.top_p = 0.95;
  sampling.min_p = 0.05;
  sampling = completed(sampling, "");
  const json messages = json::parse(build_messages_body(
      "m", json::array({{{"role", "user"}, {"content", "hi"}}}), 8, true, sampling));
  EXPECT_EQ(keys_of(messages), generated_plus({"messages", "temperature", "top_p", "min_p"}));
  EXPECT_EQ(messages["temperature"], 0.0);
  EXPECT_EQ(messages["top_p"], 0.95);
  EXPECT_EQ(messages["min_p"], 0.05);
}

TEST(RequestBody, ExtraBodyIsMergedAndMayReplaceIgnoreEos) {
  SamplingOptions given;
  given.top_p = 0.9;
  const SamplingOptions sampling = completed(
      given, R"({"seed": 7, "ignore_eos": false, "chat_template_kwargs": {"thinking": false}})");
  EXPECT_EQ(sampling.sent_sampling(), json({{"top_p", 0.9}}));
  const json body = json::parse(build_completion_body(ApiKind::chat, "m", "p", 8, true, sampling));
  EXPECT_EQ(keys_of(body), generated_plus({"messages", "top_p", "seed", "chat_template_kwargs"}));
  EXPECT_EQ(body["seed"], 7);
  EXPECT_EQ(body["ignore_eos"], false);
  EXPECT_EQ(body["chat_template_kwargs"], json({{"thinking", false}}));
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["max_tokens"], 8);
  EXPECT_EQ(body["messages"][0]["content"], "p");
}

TEST(RequestBody, EveryWorkloadSendsTheSampling) {
  SamplingOptions sampling;
  sampling.temperature = 0.5;
  sampling = completed(sampling, R"({"seed": 3})");
  WorkloadOptions options;
  options.sampling = sampling;
  const SyntheticWorkload synthetic(options, TargetEndpoint{"h"}, TokenCalibration{});
  const DatasetWorkload dataset({DatasetEntry{"a", nullptr, 4}}, ApiKind::completions, "m",
                                TargetEndpoint{"h"}, LengthDistribution::fixed_at(3), std::nullopt,
                                0, true, sampling);
  for (const std::string& text : {synthetic.request(0, 1).body, dataset.request(0, 1).body}) {
    const json body = json::parse(text);
    EXPECT_EQ(body["temperature"], 0.5) << text;
    EXPECT_EQ(body["seed"], 3) << text;
  }
}

TEST(ExtraBody, BadJsonOrNotAnObjectSaysWhatToGive) {
  EXPECT_NE(refusal({}, "{seed: 1}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal({}, "[1, 2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(refusal({}, "7").find("got a number"), std::string::npos);
}

// Copying or dumping a value recurses once per level: a deep one must be refused, not crash.
TEST(ExtraBody, DeeplyNestedValuesAreRefused) {
  const int depth = 1'000'000;
  const std::string deep =
      R"({"seed": 1, "x": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
  EXPECT_NE(refusal({}, deep).find("nests more than 64 levels"), std::string::npos);
  const std::string shallow =
      R"({"seed": 1, "x": )" + std::string(63, '[') + std::string(63, ']') + "}";
  EXPECT_EQ(completed({}, shallow).extra_body["seed"], 1);  // 64 levels, the object's included
}

TEST(ExtraBody, KeysBenchControlsAreRefusedWithTheFlagToUse) {
  EXPECT_NE(refusal({}, R"({"stream": false})").find("--no-stream"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"stream_options": {}})").find("usage"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"prompt": "x"})").find("--dataset"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"messages": []})").find("--dataset"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"model": "x"})").find("--model"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"max_tokens": 3})").find("--output-tokens"), std::string::npos);
  EXPECT_NE(refusal({}, R"({"max_completion_tokens": 3})").find("--output-tokens"),
            std::string::npos);
  for (const char* key : {"temperature", "top_p", "top_k", "min_p"}) {
    const std::string error = refusal({}, json({{key, 0}}).dump());
    EXPECT_NE(error.find('"' + std::string(key) + '"'), std::string::npos) << error;
    EXPECT_NE(error.find("use --"), std::string::npos) << error;
  }
}

TEST(SamplingFlags, OutOfRangeValuesSayTheRange) {
  auto with = [](auto field, auto value) {
    SamplingOptions sampling;
    sampling.*field = value;
    return sampling;
  };
  EXPECT_NE(refusal(with(&SamplingOptions::temperature, -0.1), "").find("--temperature"),
            std::string::npos);
  EXPECT_NE(refusal(with(&SamplingOptions::top_p, 0.0), "").find("(0, 1]"), std::string::npos);
  EXPECT_NE(refusal(with(&SamplingOptions::top_p, 1.5), "").find("(0, 1]"), std::string::npos);
  EXPECT_NE(refusal(with(&SamplingOptions::min_p, 2.0), "").find("[0, 1]"), std::string::npos);
  EXPECT_NE(refusal(with(&SamplingOptions::top_k, -2), "").find("-1 or 0"), std::string::npos);
  EXPECT_FALSE(refusal(with(&SamplingOptions::temperature, std::nan("")), "").empty());
  completed(with(&SamplingOptions::top_k, -1), "");
  completed(with(&SamplingOptions::top_p, 1.0), "");
  completed(with(&SamplingOptions::min_p, 0.0), "");
}

TEST(CompareResults, HeaderStatesWhatEachSampledAndNotesADifference) {
  const json runs = json::array({{{"load", {{"concurrency", 1}}}}});
  const json greedy = {{"workload", {{"sampling", {{"temperature", 0}}}, {"extra_body", {}}}},
                       {"runs", runs}};
  const json defaults = {{"workload", {{"sampling", json::object()}}}, {"runs", runs}};
  const json old = {{"workload", json::object()}, {"runs", runs}};
  std::string error;
  const std::string table = compare_results(greedy, defaults, "a.json", "b.json", error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_NE(table.find("A = a.json (sampling={\"temperature\":0})"), std::string::npos) << table;
  EXPECT_NE(table.find("B = b.json (sampling={})"), std::string::npos) << table;
  EXPECT_NE(table.find("not send the same sampling"), std::string::npos) << table;
  const std::string same = compare_results(greedy, greedy, "a.json", "a.json", error);
  EXPECT_EQ(same.find("not send the same sampling"), std::string::npos) << same;
  EXPECT_NE(compare_results(old, old, "o", "o", error).find("sampling not recorded"),
            std::string::npos);
}

// Result files are user input: a hand-edited one with odd types is read, never a throw.
TEST(CompareResults, OddlyTypedResultFilesAreReadWithoutThrowing) {
  const json odd = {{"workload", "text"},
                    {"runs", json::array({1, "x", {{"load", 5}, {"ttft_ms", "fast"}},
                                          {{"ttft_ms", {{"p50", "x"}}}}})}};
  const json odd_workload = {{"workload", {{"sampling", 1}, {"extra_body", 7}}},
                             {"runs", json::array({json::array()})}};
  std::string error;
  std::string table;
  EXPECT_NO_THROW(table = compare_results(odd, odd_workload, "a", "b", error));
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_NE(table.find("sampling not recorded"), std::string::npos) << table;
}

}  // namespace
}  // namespace brisk::bench
