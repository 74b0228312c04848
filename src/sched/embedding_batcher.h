#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"
#include "engine/embedding_runner.h"
#include "engine/token.h"
#include "sched/batch_window.h"
#include "sched/device_arbiter.h"

namespace brisk {

// How an embedding request ended.
struct EmbeddingOutcome {
  enum class Status { done, deadline, failed, shutting_down, cancelled };
  Status status = Status::done;
  std::string error;           // with failed or deadline
  std::vector<float> vectors;  // done: one vector of `dimensions` floats per input, in order
  int dimensions = 0;
  double queue_ms = 0;    // arrival to the start of its last batch
  double compute_ms = 0;  // summed over the batches its inputs ran in
  int batches = 0;
};

// One /v1/embeddings request: its inputs (tokenized), scheduling fields and who to tell.
struct EmbeddingJob {
  std::vector<TokenList> inputs;
  int priority = 0;        // lower runs sooner, as on the completion routes
  double deadline_ms = 0;  // > 0: dropped if its inputs have not all started by then
  TimePoint arrival;
  // Called once, on the batcher's thread: keep it short (post the response elsewhere).
  std::function<void(EmbeddingOutcome&&)> on_done;
  // Set from any thread (the client went away): the inputs still queued are dropped uncomputed
  // when the batcher next plans a batch, and on_done gets `cancelled`.
  std::atomic<bool> cancelled{false};
};

enum class EmbeddingSubmit { accepted, queue_full, shutting_down };

// Everything /metrics shows of the batcher (docs/metrics.md, "Embeddings").
class EmbeddingMetrics {
 public:
  EmbeddingMetrics();
  void observe_batch(int inputs, int tokens, double compute_seconds, BatchTrigger trigger);
  void observe_window_wait(double seconds) { window_wait_.observe(seconds); }
  void observe_tokenize(double seconds) { tokenize_.observe(seconds); }
  void observe_request(double seconds, EmbeddingOutcome::Status status);
  void count_rejection(const std::string& reason);
  std::string render_prometheus(int queued_inputs, int queued_requests) const;

 private:
  Histogram batch_inputs_;
  Histogram batch_tokens_;
  Histogram compute_;
  Histogram window_wait_;
  Histogram tokenize_;
  Histogram request_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> batches_by_trigger_;
  std::map<std::string, uint64_t> requests_by_status_;
  std::map<std::string, uint64_t> rejections_;
  uint64_t inputs_ = 0;
  uint64_t tokens_ = 0;
};

// The dynamic batcher for a stateless model: requests queue until plan_batch() says a batch
// runs, then one thread computes it on the runner and hands each request its vectors. A
// request's inputs may span batches; its answer waits for all of them.
class EmbeddingBatcher {
 public:
  // `clock` reads the time windows and deadlines are measured in (tests pass a fake one and
  // wake() the batcher after moving it).
  EmbeddingBatcher(EmbeddingRunner& runner, BatchWindowOptions options, EmbeddingMetrics& metrics,
                   std::function<TimePoint()> clock = Clock::now);
  ~EmbeddingBatcher();

  // With several models on one device: every batch first takes a turn of `arbiter` as
  // `tenant`. Before start().
  void share_device(DeviceArbiter& arbiter, DeviceArbiter::TenantId tenant) {
    arbiter_ = &arbiter;
    tenant_ = tenant;
  }
  void start();
  // Any thread. queue_full when the waiting inputs would pass --max-queued-inputs.
  EmbeddingSubmit submit(std::shared_ptr<EmbeddingJob> job);
  // Stops admitting, lets queued work finish for up to `drain_timeout`, fails the rest with
  // shutting_down and joins the thread.
  void shutdown(std::chrono::milliseconds drain_timeout);
  // Any thread: makes the batcher look at the clock again now.
  void wake() { changed_.notify_one(); }

  int queued_inputs() const;
  int queued_requests() const;
  // At --max-queued-inputs: a new request is answered 429 (and /ready says queue_full).
  bool queue_full() const { return queued_inputs() >= options_.max_queued_inputs; }
  const BatchWindowOptions& options() const { return options_; }

 private:
  struct Pending;  // a job with its results so far
  struct Waiting {
    std::shared_ptr<Pending> job;
    size_t input = 0;
  };
  void run();
  void run_batch(int inputs, BatchTrigger trigger);
  void drop_abandoned(TimePoint now);
  void finish(std::shared_ptr<Pending> job, EmbeddingOutcome::Status status, std::string error);

  EmbeddingRunner& runner_;
  const BatchWindowOptions options_;
  EmbeddingMetrics& metrics_;
  const std::function<TimePoint()> clock_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Waiting> queue_;  // guarded by mutex_: priority, then arrival
  int queued_requests_ = 0;    // guarded by mutex_
  bool accepting_ = true;      // guarded by mutex_
  bool stopping_ = false;      // guarded by mutex_
  TimePoint drain_deadline_;   // guarded by mutex_
  DeviceArbiter* arbiter_ = nullptr;  // null: the device is this model's alone
  DeviceArbiter::TenantId tenant_ = -1;
  std::thread thread_;
};

}  // namespace brisk
