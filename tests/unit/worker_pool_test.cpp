#include "common/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace brisk {
namespace {

TEST(WorkerPool, RunsEveryTaskOnceAndReturnsWhenAllHaveRun) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> runs(37);
    pool.run(37, [&](int i) { ++runs[static_cast<size_t>(i)]; });
    for (auto& count : runs) ASSERT_EQ(count.load(), 1) << "round " << round;
  }
}

TEST(WorkerPool, SharesTheTasksAmongItsThreads) {
  WorkerPool pool(2);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  pool.run(16, [&](int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id())) << "the caller works too";
}

TEST(WorkerPool, OneThreadRunsOnTheCaller) {
  WorkerPool pool(1);
  std::set<std::thread::id> threads;
  pool.run(8, [&](int) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  pool.run(0, [&](int) { ADD_FAILURE() << "no task to run"; });
}

}  // namespace
}  // namespace brisk
