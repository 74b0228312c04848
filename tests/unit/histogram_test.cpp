#include "common/histogram.h"

#include <gtest/gtest.h>

namespace brisk {

TEST(Histogram, CountsCumulativelyWithInclusiveUpperBounds) {
  Histogram histogram({0.1, 1.0});
  histogram.observe(0.05);
  histogram.observe(0.1);  // le="0.1" includes the bound itself, as Prometheus defines
  histogram.observe(0.5);
  histogram.observe(7.0);
  const Histogram::Snapshot snap = histogram.snapshot();
  EXPECT_EQ(snap.cumulative_counts, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(snap.count, 4u);
  EXPECT_DOUBLE_EQ(snap.sum, 7.65);
}

TEST(Histogram, RendersPrometheusText) {
  Histogram histogram({0.5});
  histogram.observe(0.25);
  histogram.observe(2);
  const std::string text = histogram.render_prometheus("x_seconds");
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.5\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_sum 2.25\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_count 2\n"), std::string::npos);
}

}  // namespace brisk
