#include "sched/embedding_batcher.h"

#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace brisk {
namespace {

const char* trigger_name(BatchTrigger trigger) {
  switch (trigger) {
    case BatchTrigger::full:
      return "full";
    case BatchTrigger::preferred_size:
      return "preferred_size";
    case BatchTrigger::window:
      return "window";
  }
  return "window";
}

const char* status_name(EmbeddingOutcome::Status status) {
  switch (status) {
    case EmbeddingOutcome::Status::done:
      return "done";
    case EmbeddingOutcome::Status::deadline:
      return "deadline";
    case EmbeddingOutcome::Status::failed:
      return "failed";
    case EmbeddingOutcome::Status::shutting_down:
      return "shutting_down";
    case EmbeddingOutcome::Status::cancelled:
      return "cancelled";
  }
  return "failed";
}

std::vector<double> power_of_two_buckets(double first, int count) {
  std::vector<double> bounds;
  for (double bound = first; static_cast<int>(bounds.size()) < count; bound *= 2) {
    bounds.push_back(bound);
  }
  return bounds;
}

std::string render_counts(const std::map<std::string, uint64_t>& counts, const char* name,
                          const char* label) {
  std::string out;
  for (const auto& [key, count] : counts) {
    out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, key, count);
  }
  return out;
}

}  // namespace

EmbeddingMetrics::EmbeddingMetrics()
    : batch_inputs_(power_of_two_buckets(1, 10)),
      batch_tokens_(power_of_two_buckets(16, 10)),
      compute_(Histogram::step_phase_seconds_buckets()),
      window_wait_(Histogram::step_phase_seconds_buckets()),
      tokenize_(Histogram::step_phase_seconds_buckets()),
      request_(Histogram::latency_seconds_buckets()) {}

void EmbeddingMetrics::observe_batch(int inputs, int tokens, double compute_seconds,
                                     BatchTrigger trigger) {
  batch_inputs_.observe(inputs);
  batch_tokens_.observe(tokens);
  compute_.observe(compute_seconds);
  std::lock_guard lock(mutex_);
  ++batches_by_trigger_[trigger_name(trigger)];
  inputs_ += static_cast<uint64_t>(inputs);
  tokens_ += static_cast<uint64_t>(tokens);
}

void EmbeddingMetrics::observe_request(double seconds, EmbeddingOutcome::Status status) {
  if (status == EmbeddingOutcome::Status::done) request_.observe(seconds);
  std::lock_guard lock(mutex_);
  ++requests_by_status_[status_name(status)];
}

void EmbeddingMetrics::count_rejection(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++rejections_[reason];
}

std::string EmbeddingMetrics::render_prometheus(int queued_inputs, int queued_requests) const {
  std::string out;
  auto histogram = [&out](const Histogram& h, const char* name, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    out += h.render_prometheus(name);
  };
  histogram(batch_inputs_, "brisk_embedding_batch_inputs", "Inputs per computed batch.");
  histogram(batch_tokens_, "brisk_embedding_batch_tokens", "Tokens per computed batch.");
  histogram(compute_, "brisk_embedding_batch_compute_seconds",
            "Time the model took to compute one batch.");
  histogram(window_wait_, "brisk_embedding_window_wait_seconds",
            "Time each input waited in the batcher's queue before its batch started.");
  histogram(tokenize_, "brisk_embedding_tokenize_seconds",
            "Time the I/O thread spent tokenizing one request's inputs.");
  histogram(request_, "brisk_embedding_request_seconds",
            "Arrival to response of each answered embedding request.");
  std::lock_guard lock(mutex_);
  out += fmt::format(
      "# HELP brisk_embedding_queued_inputs Inputs waiting for a batch.\n"
      "# TYPE brisk_embedding_queued_inputs gauge\nbrisk_embedding_queued_inputs {}\n"
      "# HELP brisk_embedding_queued_requests Requests with inputs waiting for a batch.\n"
      "# TYPE brisk_embedding_queued_requests gauge\nbrisk_embedding_queued_requests {}\n"
      "# HELP brisk_embedding_inputs_total Inputs embedded.\n"
      "# TYPE brisk_embedding_inputs_total counter\nbrisk_embedding_inputs_total {}\n"
      "# HELP brisk_embedding_tokens_total Input tokens embedded.\n"
      "# TYPE brisk_embedding_tokens_total counter\nbrisk_embedding_tokens_total {}\n",
      queued_inputs, queued_requests, inputs_, tokens_);
  out +=
      "# HELP brisk_embedding_batches_total Batches computed, by what started them (full, "
      "preferred_size, window).\n# TYPE brisk_embedding_batches_total counter\n";
  out += render_counts(batches_by_trigger_, "brisk_embedding_batches_total", "trigger");
  out +=
      "# HELP brisk_embedding_requests_total Embedding requests ended, by status (done, "
      "deadline, failed, shutting_down, cancelled).\n# TYPE brisk_embedding_requests_total counter\n";
  out += render_counts(requests_by_status_, "brisk_embedding_requests_total", "status");
  out +=
      "# HELP brisk_embedding_rejections_total Embedding requests refused before they queued, "
      "by reason.\n# TYPE brisk_embedding_rejections_total counter\n";
  out += render_counts(rejections_, "brisk_embedding_rejections_total", "reason");
  return out;
}

struct EmbeddingBatcher::Pending {
  std::shared_ptr<EmbeddingJob> job;
  EmbeddingOutcome outcome;
  size_t remaining = 0;  // inputs without a vector yet
  bool finished = false;
};

EmbeddingBatcher::EmbeddingBatcher(EmbeddingRunner& runner, BatchWindowOptions options,
                                   EmbeddingMetrics& metrics, std::function<TimePoint()> clock)
    : runner_(runner), options_(std::move(options)), metrics_(metrics), clock_(std::move(clock)) {}

EmbeddingBatcher::~EmbeddingBatcher() { shutdown(std::chrono::milliseconds(0)); }

void EmbeddingBatcher::start() {
  thread_ = std::thread([this] { run(); });
}

EmbeddingSubmit EmbeddingBatcher::submit(std::shared_ptr<EmbeddingJob> job) {
  auto pending = std::make_shared<Pending>();
  pending->remaining = job->inputs.size();
  pending->outcome.dimensions = runner_.dimensions();
  pending->outcome.vectors.resize(job->inputs.size() * static_cast<size_t>(runner_.dimensions()));
  pending->job = std::move(job);
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return EmbeddingSubmit::shutting_down;
    if (queue_.size() + pending->remaining > static_cast<size_t>(options_.max_queued_inputs)) {
      return EmbeddingSubmit::queue_full;
    }
    const int priority = pending->job->priority;
    auto after = std::find_if(queue_.begin(), queue_.end(), [priority](const Waiting& waiting) {
      return waiting.job->job->priority > priority;
    });
    const auto offset = after - queue_.begin();
    for (size_t i = 0; i < pending->remaining; ++i) {
      queue_.insert(queue_.begin() + offset + static_cast<std::ptrdiff_t>(i), Waiting{pending, i});
    }
    ++queued_requests_;
  }
  changed_.notify_one();
  return EmbeddingSubmit::accepted;
}

void EmbeddingBatcher::shutdown(std::chrono::milliseconds drain_timeout) {
  {
    std::lock_guard lock(mutex_);
    const TimePoint deadline = clock_() + drain_timeout;
    if (!stopping_ || deadline < drain_deadline_) drain_deadline_ = deadline;
    accepting_ = false;
    stopping_ = true;
  }
  changed_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

int EmbeddingBatcher::queued_inputs() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(queue_.size());
}

int EmbeddingBatcher::queued_requests() const {
  std::lock_guard lock(mutex_);
  return queued_requests_;
}

// Called with mutex_ held; on_done runs without it. Takes its own reference: removing the job's
// inputs from the queue may drop the last other one.
void EmbeddingBatcher::finish(std::shared_ptr<Pending> pending, EmbeddingOutcome::Status status,
                              std::string error) {
  Pending& job = *pending;
  if (job.finished) return;
  job.finished = true;
  --queued_requests_;
  job.outcome.status = status;
  job.outcome.error = std::move(error);
  if (status != EmbeddingOutcome::Status::done) job.outcome.vectors.clear();
  metrics_.observe_request(seconds_between(job.job->arrival, clock_()), status);
  std::erase_if(queue_, [&job](const Waiting& waiting) { return waiting.job.get() == &job; });
  auto on_done = std::move(job.job->on_done);
  EmbeddingOutcome outcome = std::move(job.outcome);
  mutex_.unlock();
  if (on_done) on_done(std::move(outcome));
  mutex_.lock();
}

// Called with mutex_ held: a request whose client went away, or whose deadline passed, before
// all its inputs started.
void EmbeddingBatcher::drop_abandoned(TimePoint now) {
  for (size_t i = 0; i < queue_.size(); ++i) {
    const std::shared_ptr<Pending> job = queue_[i].job;
    if (job->job->cancelled.load()) {
      finish(job, EmbeddingOutcome::Status::cancelled, "the client closed the connection");
    } else if (job->job->deadline_ms > 0 &&
               ms_between(job->job->arrival, now) >= job->job->deadline_ms) {
      finish(job, EmbeddingOutcome::Status::deadline,
             fmt::format("the request's deadline_ms ({:.0f}) passed before its inputs were "
                         "computed",
                         job->job->deadline_ms));
    } else {
      continue;
    }
    i = static_cast<size_t>(-1);  // finish() removed its inputs: start over
  }
}

void EmbeddingBatcher::run() {
  std::unique_lock lock(mutex_);
  std::vector<WaitingInput> view;
  for (;;) {
    const TimePoint now = clock_();
    drop_abandoned(now);
    if (stopping_ && (queue_.empty() || now >= drain_deadline_)) break;
    view.clear();
    std::optional<TimePoint> first_deadline;
    for (const Waiting& waiting : queue_) {
      const EmbeddingJob& job = *waiting.job->job;
      view.push_back({static_cast<int>(job.inputs[waiting.input].size()), job.arrival});
      if (job.deadline_ms > 0) {
        const TimePoint deadline =
            job.arrival + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double, std::milli>(job.deadline_ms));
        first_deadline = std::min(first_deadline.value_or(deadline), deadline);
      }
    }
    BatchWindowOptions window = options_;
    if (stopping_) window.window_ms = 0;  // draining: nothing more will arrive to wait for
    const BatchDecision decision =
        plan_batch(view, now, runner_.max_batch_tokens(), runner_.max_batch_inputs(), window);
    if (decision.inputs == 0) {
      if (decision.wake_at) {
        const TimePoint wake_at =
            std::min(*decision.wake_at, first_deadline.value_or(*decision.wake_at));
        changed_.wait_for(lock, wake_at - now);
      } else {
        changed_.wait(lock);
      }
      continue;
    }
    run_batch(decision.inputs, decision.trigger);
  }
  while (!queue_.empty()) {
    finish(queue_.front().job, EmbeddingOutcome::Status::shutting_down,
           "the request was cancelled because the server is shutting down; retry it");
  }
}

// Called with mutex_ held; computes without it.
void EmbeddingBatcher::run_batch(int inputs, BatchTrigger trigger) {
  std::vector<Waiting> batch(queue_.begin(), queue_.begin() + inputs);
  queue_.erase(queue_.begin(), queue_.begin() + inputs);
  const TimePoint started = clock_();
  std::vector<const TokenList*> tokens;
  int token_count = 0;
  for (const Waiting& waiting : batch) {
    tokens.push_back(&waiting.job->job->inputs[waiting.input]);
    token_count += static_cast<int>(tokens.back()->size());
    metrics_.observe_window_wait(seconds_between(waiting.job->job->arrival, started));
  }
  mutex_.unlock();
  std::vector<float> vectors;
  std::string error;
  bool ok = false;
  double compute_seconds = 0;
  {
    std::optional<DeviceArbiter::Turn> turn;
    if (arbiter_) turn.emplace(arbiter_->acquire(tenant_));
    const TimePoint computing = clock_();  // another model's step may have held the device
    ok = runner_.embed(tokens, &vectors, &error);
    compute_seconds = seconds_between(computing, clock_());
  }
  mutex_.lock();
  metrics_.observe_batch(inputs, token_count, compute_seconds, trigger);
  if (!ok) spdlog::error("an embedding batch of {} inputs failed: {}", inputs, error);
  const size_t dimensions = static_cast<size_t>(runner_.dimensions());
  for (size_t i = 0; i < batch.size(); ++i) {
    Pending& job = *batch[i].job;
    if (job.finished) continue;
    if (!ok) {
      finish(batch[i].job, EmbeddingOutcome::Status::failed, error);
      continue;
    }
    std::copy_n(
        vectors.begin() + static_cast<std::ptrdiff_t>(i * dimensions), dimensions,
        job.outcome.vectors.begin() + static_cast<std::ptrdiff_t>(batch[i].input * dimensions));
    job.outcome.queue_ms = ms_between(job.job->arrival, started);
    // A request counts each batch its inputs shared once.
    if (i == 0 || batch[i - 1].job.get() != &job) {
      job.outcome.compute_ms += compute_seconds * 1000.0;
      ++job.outcome.batches;
    }
    if (--job.remaining == 0) finish(batch[i].job, EmbeddingOutcome::Status::done, "");
  }
}

}  // namespace brisk
