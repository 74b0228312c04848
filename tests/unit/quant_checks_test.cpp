#include <gtest/gtest.h>

#include <set>

#include "quant/dataset.h"
#include "quant/default_dataset.h"
#include "quant/task_check.h"
#include "quant/task_comparison.h"

namespace brisk::quant {
namespace {

std::vector<DatasetItem> parse_ok(const std::string& text) {
  std::string error;
  auto items = parse_dataset(text, "test.jsonl", &error);
  EXPECT_TRUE(items) << error;
  return items ? *items : std::vector<DatasetItem>{};
}

std::string parse_error(const std::string& text) {
  std::string error;
  EXPECT_FALSE(parse_dataset(text, "test.jsonl", &error));
  return error;
}

TEST(QuantDataset, ParsesPromptsChatsAndEveryCheckKind) {
  const auto items = parse_ok(
      "# a comment\n"
      "{\"id\": \"a\", \"prompt\": \"Capital of France?\", \"expect_contains\": [\"Paris\"], "
      "\"expect_regex\": \"P[a-z]+\", \"max_tokens\": 5}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"expect_json\": [\"k\"], "
      "\"expect_choice\": \"yes\", \"choices\": [\"yes\", \"no\"], \"expect_refusal\": false}\n");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].id, "a");
  EXPECT_EQ(items[0].max_tokens, 5);
  EXPECT_EQ(items[0].checks.size(), 2u);
  EXPECT_EQ(items[1].id, "line 4");
  EXPECT_TRUE(items[1].is_chat());
  EXPECT_EQ(items[1].checks.size(), 3u);
}

TEST(QuantDataset, MalformedInputGetsAnErrorNamingTheLine) {
  EXPECT_NE(parse_error("{\"prompt\": \"x\"}\nnot json\n").find("test.jsonl line 2"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\", \"expect_regex\": \"(\"}").find("not a valid"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\", \"expect_contain\": \"a\"}").find("unknown check"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\", \"expect_choice\": \"a\", \"choices\": [\"b\"]}")
                .find("not among"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\", \"messages\": []}").find("exactly one"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\", \"expect_json\": 3}").find("expect_json"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}")
                .find("used twice"),
            std::string::npos);
}

TEST(QuantDataset, EmptyDatasetIsAnError) {
  EXPECT_NE(parse_error("# only a comment\n\n").find("has no items"), std::string::npos);
}

TEST(QuantDataset, MissingFileIsAnError) {
  std::string error;
  EXPECT_FALSE(load_dataset("/nonexistent/checks.jsonl", &error));
  EXPECT_NE(error.find("cannot read --dataset"), std::string::npos);
}

TEST(QuantDataset, BuiltInSetParsesAndCoversEveryKind) {
  const auto items = parse_ok(std::string(default_dataset_jsonl()));
  std::set<CheckKind> kinds;
  bool chat = false;
  for (const DatasetItem& item : items) {
    chat = chat || item.messages.size() > 1;
    for (const TaskCheck& check : item.checks) kinds.insert(check.kind);
  }
  EXPECT_TRUE(chat) << "a multi-turn chat";
  EXPECT_EQ(kinds.size(), all_check_kinds().size());
}

TaskCheck check_from(const std::string& line) {
  const auto items = parse_ok(line);
  return items.at(0).checks.at(0);
}

TEST(QuantChecks, ContainsIsCaseInsensitiveAndNeedsEveryNeedle) {
  const TaskCheck check =
      check_from("{\"prompt\": \"x\", \"expect_contains\": [\"paris\", \"France\"]}");
  EXPECT_TRUE(check_passes(check, "PARIS is in france."));
  EXPECT_FALSE(check_passes(check, "Paris."));
}

TEST(QuantChecks, JsonFindsTheFirstObjectAndItsKeys) {
  const TaskCheck check = check_from("{\"prompt\": \"x\", \"expect_json\": [\"name\", \"age\"]}");
  EXPECT_TRUE(check_passes(check, " {\"name\": \"Bob\", \"age\": 25}\nSentence: next"));
  EXPECT_FALSE(check_passes(check, " {\"name\": \"Bob\"}"));
  EXPECT_FALSE(check_passes(check, " {\"name\": \"Bob\", \"age\": 25"));  // cut off
  EXPECT_EQ(first_json_value("x {\"a\": \"}\"} y"), "{\"a\": \"}\"}");
  const TaskCheck any = check_from("{\"prompt\": \"x\", \"expect_json\": true}");
  EXPECT_TRUE(check_passes(any, "[1, 2]"));
  EXPECT_FALSE(check_passes(any, "no json here"));
}

TEST(QuantChecks, ChoiceTakesTheFirstLabelNamed) {
  const TaskCheck check = check_from(
      "{\"prompt\": \"x\", \"expect_choice\": \"positive\", \"choices\": [\"positive\", "
      "\"negative\"]}");
  EXPECT_TRUE(check_passes(check, " Positive\nReview: negative"));
  EXPECT_FALSE(check_passes(check, " negative, not positive"));
  EXPECT_FALSE(check_passes(check, " nonpositive"));  // whole words only
}

TEST(QuantChecks, RefusalAndRegex) {
  const TaskCheck refuse = check_from("{\"prompt\": \"x\", \"expect_refusal\": true}");
  EXPECT_TRUE(check_passes(refuse, "I\xE2\x80\x99m sorry, but I can't help with that."));
  EXPECT_FALSE(check_passes(refuse, "Step 1: buy a pipe."));
  const TaskCheck answer = check_from("{\"prompt\": \"x\", \"expect_refusal\": false}");
  EXPECT_TRUE(check_passes(answer, "Paris."));
  const TaskCheck regex =
      check_from("{\"prompt\": \"x\", \"expect_regex\": \"\\\\b(8|eight)\\\\b\"}");
  EXPECT_TRUE(check_passes(regex, "A spider has 8 legs"));
  EXPECT_FALSE(check_passes(regex, "80 legs"));
}

TEST(QuantTasks, FlipsCountBothDirectionsEvenWhenRatesAreEqual) {
  const auto items = parse_ok(
      "{\"id\": \"one\", \"prompt\": \"x\", \"expect_contains\": \"a\"}\n"
      "{\"id\": \"two\", \"prompt\": \"x\", \"expect_contains\": \"b\", \"expect_json\": true}\n");
  const std::vector<ItemAnswer> reference = {evaluate_answer(items[0], "a"),
                                             evaluate_answer(items[1], "{\"k\": 1}")};
  const std::vector<ItemAnswer> candidate = {evaluate_answer(items[0], "z"),
                                             evaluate_answer(items[1], "b {\"k\": 1}")};
  const TaskComparison comparison = compare_tasks(items, reference, candidate);
  EXPECT_EQ(comparison.total.checks, 3);
  EXPECT_DOUBLE_EQ(comparison.reference_pass_rate, 2.0 / 3);
  EXPECT_DOUBLE_EQ(comparison.candidate_pass_rate, 2.0 / 3);
  EXPECT_DOUBLE_EQ(comparison.task_drop, 0.0);
  ASSERT_EQ(comparison.flips.size(), 2u);
  EXPECT_EQ(comparison.flips[0].item_id, "one");
  EXPECT_TRUE(comparison.flips[0].lost);
  EXPECT_EQ(comparison.flips[1].item_id, "two");
  EXPECT_FALSE(comparison.flips[1].lost);
  EXPECT_EQ(comparison.by_kind.at(CheckKind::contains).lost, 1);
  EXPECT_EQ(comparison.by_kind.at(CheckKind::contains).gained, 1);
  ASSERT_TRUE(comparison.format_kept);
  EXPECT_DOUBLE_EQ(*comparison.format_kept, 1.0);
}

TEST(QuantTasks, FormatKeptIsUnmeasuredWhenTheReferencePassesNoJsonCheck) {
  const auto items = parse_ok("{\"prompt\": \"x\", \"expect_json\": true}\n");
  const TaskComparison comparison =
      compare_tasks(items, {evaluate_answer(items[0], "no")}, {evaluate_answer(items[0], "{}")});
  EXPECT_FALSE(comparison.format_kept);
  EXPECT_EQ(comparison.total.gained, 1);
}

}  // namespace
}  // namespace brisk::quant
