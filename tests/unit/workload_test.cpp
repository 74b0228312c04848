#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/dataset_workload.h"
#include "bench/length_distribution.h"
#include "bench/workload.h"
#include "bench/workload_preset.h"

namespace brisk::bench {
namespace {

LengthDistribution parse(const std::string& spec) {
  std::string error;
  auto parsed = parse_length_distribution(spec, error);
  EXPECT_TRUE(parsed) << error;
  return parsed.value_or(LengthDistribution{});
}

std::string parse_error(const std::string& spec) {
  std::string error;
  EXPECT_FALSE(parse_length_distribution(spec, error)) << spec;
  return error;
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

TEST(LengthDistribution, FixedLengthIsAlwaysTheSame) {
  const LengthDistribution fixed = parse("128");
  for (uint64_t key = 0; key < 100; ++key) EXPECT_EQ(fixed.sample(key), 128);
  EXPECT_EQ(fixed.spec(), "128");
}

TEST(LengthDistribution, UniformCoversItsWholeRangeAndNothingElse) {
  const LengthDistribution uniform = parse("uniform:64:67");
  std::map<int, int> seen;
  for (uint64_t key = 0; key < 4000; ++key) ++seen[uniform.sample(key)];
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen.begin()->first, 64);
  EXPECT_EQ(seen.rbegin()->first, 67);
  for (const auto& [length, count] : seen) EXPECT_NEAR(count, 1000, 150) << length;
  EXPECT_EQ(uniform.mean(), 65.5);
}

TEST(LengthDistribution, NormalHasItsMeanAndSpreadAndStaysPositive) {
  const LengthDistribution normal = parse("normal:128:32");
  double sum = 0, squares = 0;
  constexpr int kSamples = 20000;
  for (uint64_t key = 0; key < kSamples; ++key) {
    const double x = normal.sample(key);
    sum += x;
    squares += x * x;
  }
  const double mean = sum / kSamples;
  EXPECT_NEAR(mean, 128, 1.0);
  EXPECT_NEAR(std::sqrt(squares / kSamples - mean * mean), 32, 1.0);
  const LengthDistribution wide = parse("normal:2:50");
  for (uint64_t key = 0; key < 1000; ++key) EXPECT_GE(wide.sample(key), 1);
}

TEST(LengthDistribution, SameKeySameLength) {
  const LengthDistribution normal = parse("normal:100:20");
  EXPECT_EQ(normal.sample(42), normal.sample(42));
  std::set<int> lengths;
  for (uint64_t key = 0; key < 10; ++key) lengths.insert(normal.sample(key));
  EXPECT_GT(lengths.size(), 3u);
}

TEST(LengthDistribution, BadSpecsSayWhatIsValid) {
  EXPECT_NE(parse_error("0").find("uniform:MIN:MAX"), std::string::npos);
  parse_error("-5");
  parse_error("uniform:64");
  parse_error("normal:128:x");
  parse_error("zipf:1:2");
  EXPECT_NE(parse_error("uniform:256:64").find("uniform:64:256"), std::string::npos);
}

TEST(SyntheticWorkload, LengthsFollowTheDistributionAndTheSeed) {
  WorkloadOptions options;
  options.input_tokens = parse("uniform:50:400");
  options.output_tokens = parse("uniform:1:1000");
  options.seed = 7;
  TokenCalibration calibration;
  calibration.tokens_per_word = 1.0;
  calibration.header_tokens = 10;
  const SyntheticWorkload workload(options, TargetEndpoint{"h"}, calibration);
  // The same seed in another workload gives the same prompts (it once compared one workload's
  // prompt with itself); another seed gives other lengths.
  const SyntheticWorkload again(options, TargetEndpoint{"h"}, calibration);
  WorkloadOptions other_seed = options;
  other_seed.seed = 8;
  const SyntheticWorkload other(other_seed, TargetEndpoint{"h"}, calibration);
  int same_length_elsewhere = 0;
  std::set<size_t> prompt_sizes;
  std::set<int> output_sizes;
  for (int i = 0; i < 20; ++i) {
    prompt_sizes.insert(workload.prompt(0, i).size());
    output_sizes.insert(workload.output_tokens(0, i));
    EXPECT_EQ(workload.prompt(0, i), again.prompt(0, i));
    EXPECT_EQ(workload.output_tokens(0, i), again.output_tokens(0, i));
    if (workload.output_tokens(0, i) == other.output_tokens(0, i)) ++same_length_elsewhere;
    const auto body = nlohmann::json::parse(workload.request(0, i).body);
    EXPECT_EQ(body["max_tokens"], workload.output_tokens(0, i));
  }
  EXPECT_GT(prompt_sizes.size(), 10u);
  EXPECT_LT(same_length_elsewhere, 3);  // of 20 draws from 1..1000
  EXPECT_GT(output_sizes.size(), 10u);

  options.seed = 8;
  const SyntheticWorkload reseeded(options, TargetEndpoint{"h"}, calibration);
  EXPECT_NE(reseeded.prompt(0, 0), workload.prompt(0, 0));
}

TEST(Preset, StandardCoversShortAndLongAtLowAndPeak) {
  std::string error;
  const auto cases = parse_workload_preset("standard", error);
  ASSERT_TRUE(cases) << error;
  ASSERT_EQ(cases->size(), 4u);
  EXPECT_EQ((*cases)[0].name, "short_input_low_concurrency");
  EXPECT_EQ((*cases)[3].name, "long_input_peak_concurrency");
  EXPECT_EQ((*cases)[0].input_tokens, 128);
  EXPECT_EQ((*cases)[3].input_tokens, 2048);
  EXPECT_EQ((*cases)[0].concurrency, 1);
  EXPECT_EQ((*cases)[3].concurrency, 16);

  const auto sized = parse_workload_preset("standard:short=16,long=64,peak=4,output=8", error);
  ASSERT_TRUE(sized) << error;
  EXPECT_EQ((*sized)[1].input_tokens, 16);
  EXPECT_EQ((*sized)[1].concurrency, 4);
  EXPECT_EQ((*sized)[2].input_tokens, 64);
  EXPECT_EQ((*sized)[2].output_tokens, 8);

  EXPECT_FALSE(parse_workload_preset("huge", error));
  EXPECT_NE(error.find("standard"), std::string::npos);
  EXPECT_FALSE(parse_workload_preset("standard:peak=0", error));
  EXPECT_FALSE(parse_workload_preset("standard:width=3", error));
  EXPECT_NE(error.find("width"), std::string::npos);
}

TEST(JsonlDataset, ReadsPromptsMessagesAndLengths) {
  const auto path = write_temp("brisk_dataset_ok.jsonl",
                               "{\"prompt\": \"a\"}\n\n"
                               "{\"messages\": [{\"role\": \"user\", \"content\": \"b\"}], "
                               "\"max_tokens\": 7}\n");
  std::string error;
  const auto entries = load_jsonl_dataset(path.string(), error);
  ASSERT_TRUE(entries) << error;
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].prompt, "a");
  EXPECT_FALSE((*entries)[0].output_tokens);
  EXPECT_TRUE((*entries)[1].has_messages());
  EXPECT_EQ((*entries)[1].output_tokens, 7);

  DatasetWorkload workload(*entries, ApiKind::chat, "m", TargetEndpoint{"h"},
                           LengthDistribution::fixed_at(3), std::nullopt, 0, true, {});
  // Request i sends entry i mod n: the test set repeats in order.
  const auto first = nlohmann::json::parse(workload.request(0, 0).body);
  const auto third = nlohmann::json::parse(workload.request(5, 2).body);
  EXPECT_EQ(first["messages"][0]["content"], "a");
  EXPECT_EQ(first["max_tokens"], 3);
  EXPECT_EQ(third, first);
  EXPECT_EQ(nlohmann::json::parse(workload.request(0, 1).body)["max_tokens"], 7);
  EXPECT_EQ(workload.request(0, 1).route, "/v1/chat/completions");
}

TEST(JsonlDataset, ABadLineIsNamed) {
  std::string error;
  EXPECT_FALSE(load_jsonl_dataset(
      write_temp("brisk_dataset_bad.jsonl", "{\"prompt\": \"a\"}\n{\"text\": 3}\n").string(),
      error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  EXPECT_FALSE(load_jsonl_dataset(
      write_temp("brisk_dataset_bad2.jsonl", "{\"prompt\": \"a\", \"max_tokens\": -1}\n").string(),
      error));
  EXPECT_NE(error.find("max_tokens"), std::string::npos) << error;
  EXPECT_FALSE(load_jsonl_dataset("/nonexistent/file.jsonl", error));
}

// Caught by tests/fuzz/jsonl_dataset_fuzzer: a length past INT_MAX wrapped around (4294967297
// became 1), and messages nested deeper than the stack allows overflowed it when they were
// copied into a request.
TEST(JsonlDataset, LengthsPastIntAndDeeplyNestedMessagesAreRefused) {
  std::string error;
  for (const char* length : {"4294967297", "2147483648", "18446744073709551615"}) {
    EXPECT_FALSE(load_jsonl_dataset(
        write_temp("brisk_dataset_long.jsonl",
                   std::string("{\"prompt\": \"a\", \"max_tokens\": ") + length + "}\n")
            .string(),
        error))
        << length;
    EXPECT_NE(error.find("max_tokens"), std::string::npos) << error;
  }
  const auto largest = load_jsonl_dataset(
      write_temp("brisk_dataset_max.jsonl", "{\"prompt\": \"a\", \"max_tokens\": 2147483647}\n")
          .string(),
      error);
  ASSERT_TRUE(largest) << error;
  EXPECT_EQ((*largest)[0].output_tokens, 2147483647);

  const int depth = 1'000'000;
  const std::string deep =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"x\": " + std::string(depth, '[') +
      std::string(depth, ']') + "}]}\n";
  EXPECT_FALSE(load_jsonl_dataset(write_temp("brisk_dataset_deep.jsonl", deep).string(), error));
  EXPECT_NE(error.find("line 1 has \"messages\" nested more than 64 levels"), std::string::npos)
      << error;
}

// An empty "messages" beside a prompt is no chat: the prompt is sent.
TEST(JsonlDataset, EmptyMessagesBesideAPromptSendThePrompt) {
  std::string error;
  const auto entries = load_jsonl_dataset(
      write_temp("brisk_dataset_empty.jsonl", "{\"prompt\": \"a\", \"messages\": []}\n").string(),
      error);
  ASSERT_TRUE(entries) << error;
  EXPECT_FALSE((*entries)[0].has_messages());
  EXPECT_EQ((*entries)[0].prompt, "a");
}

TEST(ShareGptDataset, TakesFirstExchangeFiltersAndShufflesBySeed) {
  nlohmann::json conversations = nlohmann::json::array();
  for (int i = 0; i < 30; ++i) {
    conversations.push_back(
        {{"conversations",
          {{{"from", "human"}, {"value", "prompt number " + std::to_string(i) + " here ok"}},
           {{"from", "gpt"}, {"value", std::string(4 * (5 + i), 'x')}}}}});
  }
  conversations.push_back({{"conversations", {{{"from", "gpt"}, {"value", "no question"}}}}});
  conversations.push_back(
      {{"conversations",
        {{{"from", "human"}, {"value", "hi"}}, {{"from", "gpt"}, {"value", "x"}}}}});
  const auto path = write_temp("brisk_sharegpt.json", conversations.dump());
  // 4 characters per token: the fallback when the server cannot tokenize.
  auto no_tokenizer = [](const std::string&) { return std::optional<int>(); };
  std::string error;
  const auto sample = load_sharegpt_dataset(path.string(), 40, 1, {}, no_tokenizer, error);
  ASSERT_TRUE(sample) << error;
  EXPECT_EQ(sample->size(), 30u);  // the orphan reply and the too-short exchange are dropped
  const auto again = load_sharegpt_dataset(path.string(), 5, 1, {}, no_tokenizer, error);
  const auto other = load_sharegpt_dataset(path.string(), 5, 2, {}, no_tokenizer, error);
  ASSERT_TRUE(again && other);
  EXPECT_EQ((*again)[0].prompt, (*sample)[0].prompt);
  std::vector<std::string> a, b;
  for (const auto& entry : *again) a.push_back(entry.prompt);
  for (const auto& entry : *other) b.push_back(entry.prompt);
  EXPECT_NE(a, b);
  for (const auto& entry : *sample) {
    const int number = std::stoi(entry.prompt.substr(std::string("prompt number ").size()));
    EXPECT_EQ(entry.output_tokens, 5 + number);
  }
  EXPECT_FALSE(load_sharegpt_dataset(write_temp("brisk_not_sharegpt.json", "{}").string(), 5, 1, {},
                                     no_tokenizer, error));
  EXPECT_NE(error.find("conversations"), std::string::npos);
}

}  // namespace
}  // namespace brisk::bench
