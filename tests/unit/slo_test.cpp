#include "bench/slo.h"

#include <gtest/gtest.h>

#include "bench/run_statistics.h"

namespace brisk::bench {

TEST(Slo, ParsesLimitsWithUnits) {
  std::string error;
  const auto slo = parse_slo("ttft_p99=500ms,tpot_p95=0.05s,e2e_max=2000", error);
  ASSERT_TRUE(slo) << error;
  ASSERT_EQ(slo->limits.size(), 3u);
  EXPECT_EQ(slo->limits[0].metric, "ttft");
  EXPECT_EQ(slo->limits[0].stat, "p99");
  EXPECT_DOUBLE_EQ(slo->limits[0].limit_ms, 500);
  EXPECT_DOUBLE_EQ(slo->limits[1].limit_ms, 50);
  EXPECT_DOUBLE_EQ(slo->limits[2].limit_ms, 2000);
}

TEST(Slo, TheMeanIsAStatisticToo) {
  // Documented for brisk plan's e2e, and once refused by the parser.
  std::string error;
  const auto slo = parse_slo("e2e_mean=900ms", error);
  ASSERT_TRUE(slo) << error;
  RunStatistics stats;
  stats.ok = 4;
  stats.e2e_ms.count = 4;
  stats.e2e_ms.mean = 800;
  stats.e2e_ms.p99 = 1500;
  EXPECT_TRUE(slo->run_meets(stats));  // the mean, not the p99
  stats.e2e_ms.mean = 950;
  EXPECT_FALSE(slo->run_meets(stats));
}

TEST(Slo, RejectsWhatItCannotCheckWithAReason) {
  std::string error;
  EXPECT_FALSE(parse_slo("latency_p99=5ms", error));
  EXPECT_NE(error.find("unknown SLO metric"), std::string::npos);
  EXPECT_FALSE(parse_slo("ttft_p42=5ms", error));
  EXPECT_NE(error.find("unknown SLO statistic"), std::string::npos);
  EXPECT_FALSE(parse_slo("ttft_p99=-5ms", error));
  EXPECT_FALSE(parse_slo("ttft_p99", error));
  EXPECT_FALSE(parse_slo("ttft_p99=fast", error));
}

TEST(Slo, JudgesRunsAndRequests) {
  std::string error;
  const Slo slo = *parse_slo("ttft_p99=100ms,tpot_p99=20ms", error);
  RunStatistics stats;
  stats.ok = 10;
  stats.ttft_ms.count = stats.tpot_ms.count = 10;
  stats.ttft_ms.p99 = 90;
  stats.tpot_ms.p99 = 19;
  EXPECT_TRUE(slo.run_meets(stats));
  stats.tpot_ms.p99 = 25;
  EXPECT_FALSE(slo.run_meets(stats));
  ASSERT_EQ(slo.misses(stats).size(), 1u);
  EXPECT_NE(slo.misses(stats)[0].find("tpot_p99"), std::string::npos);
  stats.tpot_ms.p99 = 19;
  stats.ok = 0;  // every latency within its limit, but nothing succeeded
  EXPECT_FALSE(slo.run_meets(stats));
  EXPECT_EQ(slo.misses(stats), std::vector<std::string>{"no request succeeded"});

  EXPECT_TRUE(slo.request_meets(50, 10.0, 500));
  EXPECT_FALSE(slo.request_meets(150, 10.0, 500));
  EXPECT_FALSE(slo.request_meets(50, 30.0, 500));
  EXPECT_TRUE(slo.request_meets(50, std::nullopt, 500));  // one token: no TPOT to judge
}

TEST(Slo, ALimitWithNoSamplesIsNotMeasuredNeverMet) {
  // --no-stream has no TTFT, ITL or TPOT; 1-token outputs have no ITL. Their summaries are all
  // 0, which once passed every limit (slo_met true, --find-max-rate "inf").
  std::string error;
  const Slo slo = *parse_slo("ttft_p99=100ms,itl_p99=20ms,e2e_p99=900ms", error);
  RunStatistics stats;
  stats.ok = 10;
  stats.e2e_ms.count = 10;
  stats.e2e_ms.p99 = 500;
  EXPECT_FALSE(slo.run_meets(stats));
  EXPECT_EQ(slo.misses(stats), (std::vector<std::string>{"ttft_p99 not measured (no samples)",
                                                         "itl_p99 not measured (no samples)"}));
  EXPECT_EQ(slo.unmeasured(stats), (std::vector<std::string>{"ttft_p99", "itl_p99"}));
}

TEST(Slo, GoodputCountsOnlyRequestsMeetingEveryLimit) {
  std::string error;
  const Slo slo = *parse_slo("ttft_p99=100ms", error);
  const TimePoint t0 = Clock::now();
  auto at = [&](double ms) {
    return t0 + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::milli>(ms));
  };
  std::vector<RequestRecord> records(2);
  for (auto& r : records) {
    r.sent = r.scheduled = at(0);
    r.http_status = 200;
    r.completion_tokens = 2;
  }
  records[0].content_chunks = {at(50), at(60)};
  records[0].end = at(60);
  records[1].content_chunks = {at(150), at(160)};
  records[1].end = at(160);
  const RunStatistics stats =
      compute_run_statistics(records, at(0), at(1000), LatencyOrigin::sent, &slo);
  EXPECT_EQ(stats.good_requests, 1);
  EXPECT_DOUBLE_EQ(stats.goodput, 1.0);  // one good request in one second
}

}  // namespace brisk::bench
