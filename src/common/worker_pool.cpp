#include "common/worker_pool.h"

#include <algorithm>

namespace brisk {

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void WorkerPool::run(int task_count, const std::function<void(int)>& task) {
  if (task_count <= 0) return;
  if (workers_.empty() || task_count == 1) {
    for (int i = 0; i < task_count; ++i) task(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    task_count_ = task_count;
    next_task_ = 0;
    unfinished_ = task_count;
    ++generation_;
  }
  work_ready_.notify_all();
  run_tasks();
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return unfinished_ == 0; });
  task_ = nullptr;
}

// Claims and runs tasks of the current batch until none is left.
void WorkerPool::run_tasks() {
  std::unique_lock lock(mutex_);
  while (task_ != nullptr && next_task_ < task_count_) {
    const int index = next_task_++;
    const std::function<void(int)>& task = *task_;
    lock.unlock();
    task(index);
    lock.lock();
    if (--unfinished_ == 0) work_done_.notify_one();
  }
}

void WorkerPool::work() {
  unsigned seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_tasks();
  }
}

}  // namespace brisk
