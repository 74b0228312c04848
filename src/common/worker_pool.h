#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace brisk {

// A fork-join pool for short, even pieces of work (one engine step's samples): run() hands out
// task indices to the calling thread and the workers, and returns when every task has run.
// Tasks must not throw. One caller at a time.
class WorkerPool {
 public:
  // `threads` counts the caller: 1 runs everything on the caller, with no worker thread.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  void run(int task_count, const std::function<void(int)>& task);

 private:
  void work();
  void run_tasks();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int)>* task_ = nullptr;  // guarded by mutex_
  int task_count_ = 0;                              // guarded by mutex_
  int next_task_ = 0;                               // guarded by mutex_
  int unfinished_ = 0;                              // guarded by mutex_
  unsigned generation_ = 0;                         // guarded by mutex_
  bool stopping_ = false;                           // guarded by mutex_
  std::vector<std::thread> workers_;
};

}  // namespace brisk
