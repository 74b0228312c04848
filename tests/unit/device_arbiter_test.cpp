// The device arbiter: which model's step runs next when several share one device.
#include "sched/device_arbiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_clock.h"

namespace brisk {
namespace {

using namespace std::chrono_literals;

void wait_until_waiting(const DeviceArbiter& arbiter, int tenants) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (arbiter.waiting_tenants() < tenants) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a tenant never started waiting";
    std::this_thread::sleep_for(1ms);
  }
}

// Two tenants that always have work, each running `step` of fake time per step, until `steps`
// steps ran in all; the first holds the device when the second starts waiting. Returns who ran
// each step.
std::vector<int> run_both(DeviceArbiter& arbiter, testing::FakeClock& clock,
                          DeviceArbiter::TenantId first, DeviceArbiter::TenantId second,
                          int steps) {
  std::mutex order_mutex;
  std::vector<int> order;
  std::atomic<bool> done{false};
  auto loop = [&](DeviceArbiter::Turn turn, int id) {
    for (;;) {
      {
        std::lock_guard lock(order_mutex);
        if (static_cast<int>(order.size()) >= steps) break;
        order.push_back(id);
      }
      clock.advance(1ms);  // the step, on the device
      arbiter.between_steps(turn);
    }
    done = true;
  };
  DeviceArbiter::Turn first_turn = arbiter.acquire(first);
  std::thread second_thread([&] { loop(arbiter.acquire(second), second); });
  wait_until_waiting(arbiter, 1);
  loop(std::move(first_turn), first);
  second_thread.join();
  return order;
}

int count(const std::vector<int>& order, int id) {
  return static_cast<int>(std::count(order.begin(), order.end(), id));
}

TEST(DeviceArbiter, AloneATenantRunsAtOnceAndIsChargedItsBusyTime) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto only = arbiter.add_tenant({"only"});
  {
    DeviceArbiter::Turn turn = arbiter.acquire(only);
    clock.advance(2s);
    arbiter.between_steps(turn);  // nobody waits: it keeps the device
    clock.advance(1s);
  }
  EXPECT_DOUBLE_EQ(arbiter.busy_seconds(only), 3.0);
  const std::string metrics = arbiter.render_prometheus();
  EXPECT_NE(metrics.find("brisk_device_busy_seconds_total{model=\"only\"} 3\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("brisk_arbiter_wait_seconds_count{model=\"only\"} 2\n"),
            std::string::npos)
      << metrics;
}

TEST(DeviceArbiter, EqualWeightsTakeTurns) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto a = arbiter.add_tenant({"a"});
  const auto b = arbiter.add_tenant({"b"});
  const std::vector<int> order = run_both(arbiter, clock, a, b, 100);
  EXPECT_EQ(count(order, a), 50);
  EXPECT_EQ(count(order, b), 50);
  for (size_t i = 1; i < order.size(); ++i) EXPECT_NE(order[i], order[i - 1]) << "step " << i;
}

TEST(DeviceArbiter, WeightsShareTheDeviceInProportion) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto light = arbiter.add_tenant({"light", 1.0});
  const auto heavy = arbiter.add_tenant({"heavy", 3.0});
  const std::vector<int> order = run_both(arbiter, clock, light, heavy, 400);
  EXPECT_NEAR(count(order, heavy), 300, 2);
  EXPECT_NEAR(arbiter.busy_seconds(heavy) / arbiter.busy_seconds(light), 3.0, 0.05);
}

TEST(DeviceArbiter, ACriticalTenantGoesFirstWheneverItWaits) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto noisy = arbiter.add_tenant({"noisy", 100.0});
  const auto critical = arbiter.add_tenant({"critical", 1.0, /*critical=*/true});
  // The noisy one holds the device; from the moment the critical one waits, it runs every step
  // until it has no more work, whatever the weights say.
  const std::vector<int> order = run_both(arbiter, clock, noisy, critical, 50);
  EXPECT_EQ(order.front(), noisy);
  EXPECT_EQ(count(order, critical), 49);
}

TEST(DeviceArbiter, IdleTimeIsNoCredit) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto busy = arbiter.add_tenant({"busy"});
  const auto late = arbiter.add_tenant({"late"});
  {
    DeviceArbiter::Turn turn = arbiter.acquire(busy);
    for (int i = 0; i < 100; ++i) {
      clock.advance(1ms);
      arbiter.between_steps(turn);
    }
  }
  // `late` used nothing while `busy` ran 100 steps; once both want the device they alternate
  // instead of `late` taking the next 100 steps.
  const std::vector<int> order = run_both(arbiter, clock, busy, late, 20);
  EXPECT_EQ(count(order, busy), 10);
  EXPECT_EQ(count(order, late), 10);
}

TEST(DeviceArbiter, AnEndedTurnGoesToTheNextInLine) {
  testing::FakeClock clock;
  DeviceArbiter arbiter(clock.function());
  const auto a = arbiter.add_tenant({"a"});
  const auto b = arbiter.add_tenant({"b"});
  std::atomic<bool> b_ran{false};
  std::optional<DeviceArbiter::Turn> held(arbiter.acquire(a));
  std::thread waiter([&] {
    DeviceArbiter::Turn turn = arbiter.acquire(b);
    b_ran = true;
  });
  wait_until_waiting(arbiter, 1);
  EXPECT_FALSE(b_ran);
  clock.advance(5ms);
  held.reset();
  waiter.join();
  EXPECT_TRUE(b_ran);
  const std::string metrics = arbiter.render_prometheus();
  // b waited the 5 ms a held the device.
  EXPECT_NE(metrics.find("brisk_arbiter_wait_seconds_sum{model=\"b\"} 0.005\n"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace brisk
