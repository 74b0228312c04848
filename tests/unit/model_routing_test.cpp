// How a server of several models reads which model a request names, and joins the models'
// metrics into one exposition.
#include <gtest/gtest.h>

#include "server/metrics_exposition.h"
#include "server/model_registry.h"
#include "server/rejection_counts.h"

namespace brisk {
namespace {

TEST(RequestedModelName, ReadsTheTopLevelField) {
  EXPECT_EQ(requested_model_name(R"({"model": "a", "messages": []})"), "a");
  EXPECT_EQ(requested_model_name(R"({"messages": [{"role": "user"}], "model": "b"})"), "b");
  EXPECT_EQ(requested_model_name(R"({"model": "caf\u00e9"})"), "caf\xc3\xa9");
}

TEST(RequestedModelName, IgnoresModelKeysInsideOtherFields) {
  // A tool's JSON schema may well have a property called "model".
  EXPECT_EQ(requested_model_name(
                R"({"tools": [{"function": {"parameters": {"model": "x"}}}], "model": "real"})"),
            "real");
  EXPECT_EQ(requested_model_name(R"({"metadata": {"model": "x"}})"), std::nullopt);
  EXPECT_EQ(requested_model_name(R"([{"model": "x"}])"), std::nullopt);
}

TEST(RequestedModelName, NothingWhenTheFieldIsNoStringOrTheBodyNoJson) {
  EXPECT_EQ(requested_model_name(R"({"model": 3})"), std::nullopt);
  EXPECT_EQ(requested_model_name(R"({"model": ["a"]})"), std::nullopt);
  EXPECT_EQ(requested_model_name(R"({"model": null})"), std::nullopt);
  EXPECT_EQ(requested_model_name("not json"), std::nullopt);
  EXPECT_EQ(requested_model_name(""), std::nullopt);
  // Stops at the field: what follows it is the route's parser's to judge.
  EXPECT_EQ(requested_model_name(R"({"model": "a", "broken)"), "a");
}

TEST(MetricsExposition, LabelsEachModelsSamplesAndKeepsOneHeaderPerFamily) {
  const std::string part =
      "# HELP brisk_requests_running Requests running.\n"
      "# TYPE brisk_requests_running gauge\n"
      "brisk_requests_running 2\n"
      "# HELP brisk_ttft_seconds Time to first token.\n"
      "# TYPE brisk_ttft_seconds histogram\n"
      "brisk_ttft_seconds_bucket{le=\"0.1\"} 1\n"
      "brisk_ttft_seconds_bucket{le=\"+Inf\"} 3\n"
      "brisk_ttft_seconds_sum 0.5\n"
      "brisk_ttft_seconds_count 3\n";
  MetricsExposition exposition;
  exposition.add(part, "a");
  exposition.add(part, "b\"c");
  exposition.add("# HELP brisk_connections Open.\n# TYPE brisk_connections gauge\n"
                 "brisk_connections 4\n",
                 "");
  EXPECT_EQ(exposition.render(),
            "# HELP brisk_requests_running Requests running.\n"
            "# TYPE brisk_requests_running gauge\n"
            "brisk_requests_running{model=\"a\"} 2\n"
            "brisk_requests_running{model=\"b\\\"c\"} 2\n"
            "# HELP brisk_ttft_seconds Time to first token.\n"
            "# TYPE brisk_ttft_seconds histogram\n"
            "brisk_ttft_seconds_bucket{model=\"a\",le=\"0.1\"} 1\n"
            "brisk_ttft_seconds_bucket{model=\"a\",le=\"+Inf\"} 3\n"
            "brisk_ttft_seconds_sum{model=\"a\"} 0.5\n"
            "brisk_ttft_seconds_count{model=\"a\"} 3\n"
            "brisk_ttft_seconds_bucket{model=\"b\\\"c\",le=\"0.1\"} 1\n"
            "brisk_ttft_seconds_bucket{model=\"b\\\"c\",le=\"+Inf\"} 3\n"
            "brisk_ttft_seconds_sum{model=\"b\\\"c\"} 0.5\n"
            "brisk_ttft_seconds_count{model=\"b\\\"c\"} 3\n"
            "# HELP brisk_connections Open.\n# TYPE brisk_connections gauge\n"
            "brisk_connections 4\n");
}

TEST(MetricsExposition, AnUnlabelledPartIsUnchanged) {
  const std::string part =
      "# HELP x_total X.\n# TYPE x_total counter\nx_total{reason=\"a\"} 1\nx_total{reason=\"b\"} "
      "2\n# HELP y Y.\n# TYPE y gauge\ny 0\n";
  MetricsExposition exposition;
  exposition.add(part, "");
  EXPECT_EQ(exposition.render(), part);
}

TEST(RejectionCounts, ByReasonForOneModelAndByModelForSeveral) {
  RejectionCounts counts;
  counts.count("a", "queue_full");
  counts.count("b", "queue_full");
  counts.count("", "unauthorized");
  const std::string header =
      "# HELP brisk_requests_rejected_total Requests refused before running, by reason.\n"
      "# TYPE brisk_requests_rejected_total counter\n";
  EXPECT_EQ(counts.render_prometheus(false),
            header +
                "brisk_requests_rejected_total{reason=\"queue_full\"} 2\n"
                "brisk_requests_rejected_total{reason=\"unauthorized\"} 1\n");
  EXPECT_EQ(counts.render_prometheus(true),
            header +
                "brisk_requests_rejected_total{reason=\"unauthorized\"} 1\n"
                "brisk_requests_rejected_total{model=\"a\",reason=\"queue_full\"} 1\n"
                "brisk_requests_rejected_total{model=\"b\",reason=\"queue_full\"} 1\n");
}

}  // namespace
}  // namespace brisk
