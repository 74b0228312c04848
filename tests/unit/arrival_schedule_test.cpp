#include <cmath>
#include <limits>
#include <numeric>

#include <gtest/gtest.h>

#include "bench/load_runner.h"
#include "bench/run_statistics.h"

namespace brisk::bench {
namespace {

double mean_gap(const std::vector<double>& offsets) {
  return offsets.back() / static_cast<double>(offsets.size() - 1);
}

LoadPoint open_load(double rate, ArrivalProcess arrival, double burstiness = 1.0) {
  LoadPoint load;
  load.rate = rate;
  load.arrival = arrival;
  load.burstiness = burstiness;
  return load;
}

}  // namespace

TEST(ArrivalSchedule, ConstantRateIsEvenlySpaced) {
  const auto offsets = arrival_offsets_s(open_load(4.0, ArrivalProcess::constant), 5, 1);
  EXPECT_EQ(offsets, (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
}

TEST(ArrivalSchedule, PoissonAndGammaKeepTheMeanRate) {
  for (const auto arrival : {ArrivalProcess::poisson, ArrivalProcess::gamma}) {
    const auto offsets = arrival_offsets_s(open_load(10.0, arrival, 0.5), 20000, 7);
    EXPECT_NEAR(mean_gap(offsets), 0.1, 0.005);
    EXPECT_TRUE(std::is_sorted(offsets.begin(), offsets.end()));
  }
}

TEST(ArrivalSchedule, LowBurstinessMeansMoreVariableGaps) {
  auto gap_variance = [](const std::vector<double>& offsets) {
    std::vector<double> gaps;
    for (size_t i = 1; i < offsets.size(); ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
    double sum = 0;
    for (double g : gaps) sum += (g - mean) * (g - mean);
    return sum / gaps.size();
  };
  const auto bursty = arrival_offsets_s(open_load(10.0, ArrivalProcess::gamma, 0.25), 20000, 3);
  const auto poisson = arrival_offsets_s(open_load(10.0, ArrivalProcess::poisson), 20000, 3);
  EXPECT_GT(gap_variance(bursty), 2.0 * gap_variance(poisson));
}

TEST(ArrivalSchedule, SameSeedSameSchedule) {
  const LoadPoint load = open_load(3.0, ArrivalProcess::poisson);
  EXPECT_EQ(arrival_offsets_s(load, 50, 42), arrival_offsets_s(load, 50, 42));
  EXPECT_NE(arrival_offsets_s(load, 50, 42), arrival_offsets_s(load, 50, 43));
}

TEST(ArrivalSchedule, InfiniteRateSendsEverythingAtOnce) {
  const auto offsets = arrival_offsets_s(
      open_load(std::numeric_limits<double>::infinity(), ArrivalProcess::poisson), 4, 1);
  EXPECT_EQ(offsets, (std::vector<double>(4, 0.0)));
}

// A client that sends 40 ms late must not make the server look 40 ms faster.
TEST(OpenLoopStatistics, LatencyCountsFromTheScheduleAndLagIsReported) {
  const TimePoint t0 = Clock::now();
  auto at = [&](double ms) {
    return t0 + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::milli>(ms));
  };
  RequestRecord record;
  record.scheduled = at(0);
  record.sent = at(40);
  record.content_chunks = {at(100), at(110)};
  record.end = at(110);
  record.completion_tokens = 2;
  record.http_status = 200;
  RequestRecord second = record;
  second.scheduled = at(500);
  second.sent = at(500);
  second.content_chunks = {at(560), at(570)};
  second.end = at(570);

  const RunStatistics from_schedule =
      compute_run_statistics({record, second}, at(0), at(570), LatencyOrigin::scheduled);
  EXPECT_DOUBLE_EQ(from_schedule.ttft_ms.max, 100.0);
  EXPECT_DOUBLE_EQ(from_schedule.schedule_lag_ms.max, 40.0);
  EXPECT_NEAR(from_schedule.achieved_rate, 1.0 / 0.46, 1e-9);
  const RunStatistics from_send =
      compute_run_statistics({record, second}, at(0), at(570), LatencyOrigin::sent);
  EXPECT_DOUBLE_EQ(from_send.ttft_ms.max, 60.0);
}

TEST(ArrivalSchedule, DurationKeepsEveryArrivalBeforeItAndTheSameSchedule) {
  const LoadPoint constant = open_load(4.0, ArrivalProcess::constant);
  EXPECT_EQ(arrival_offsets_within_s(constant, 1.0, 1),
            (std::vector<double>{0.0, 0.25, 0.5, 0.75}));
  const LoadPoint poisson = open_load(50.0, ArrivalProcess::poisson);
  const auto within = arrival_offsets_within_s(poisson, 10.0, 3);
  ASSERT_GT(within.size(), 400u);
  EXPECT_LT(within.back(), 10.0);
  // The same seed draws the same gaps whether the run is bounded by count or by time.
  EXPECT_EQ(arrival_offsets_s(poisson, static_cast<int>(within.size()), 3), within);
  EXPECT_TRUE(arrival_offsets_within_s(open_load(INFINITY, ArrivalProcess::poisson), 5, 1).empty());
}

}  // namespace brisk::bench
