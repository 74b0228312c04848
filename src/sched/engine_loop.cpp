#include "sched/engine_loop.h"

#include <cmath>
#include <future>
#include <optional>

#include <spdlog/spdlog.h>

namespace brisk {

namespace {

// What a newcomer may move a late request's first token without pushing it: the forecasts with
// and without it differ by float noise.
constexpr double kPushToleranceMs = 1;

}  // namespace

EngineLoop::EngineLoop(ModelRunner& engine, SchedulerOptions options, ServingMetrics& metrics)
    : options_(options),
      forecast_options_{options, engine.context_size(),
                        engine.sequence_context_size() < engine.context_size()},
      scheduler_(engine, options, metrics, [this](SchedulerReport&& report) {
        receive(std::move(report));
      }) {}

EngineLoop::~EngineLoop() { shutdown(std::chrono::milliseconds(0)); }

void EngineLoop::share_device(DeviceArbiter& arbiter, DeviceArbiter::TenantId tenant) {
  arbiter_ = &arbiter;
  tenant_ = tenant;
}

void EngineLoop::start() {
  // The warm-up runs on the engine thread, as every later step does, and start() returns once
  // it is done (or rethrows what it threw). ggml-cpu runs a step on an OpenMP team of the thread
  // that calls llama_decode; a second calling thread leaves a second team idle, and libgomp,
  // counting more threads than cores, then sleeps in the kernel at every barrier of every step
  // instead of spinning (BENCHMARKS.md, "The warm-up on the engine thread").
  std::promise<void> warmed_up;
  std::future<void> ready = warmed_up.get_future();
  engine_thread_ = std::thread([this, &warmed_up] {
    try {
      warm_up();
    } catch (...) {
      warmed_up.set_exception(std::current_exception());
      return;
    }
    warmed_up.set_value();
    run();
  });
  ready.get();
}

void EngineLoop::warm_up() {
  if (!options_.warm_up) return;
  std::optional<DeviceArbiter::Turn> turn;  // another model's steps would time its steps
  if (arbiter_) turn.emplace(arbiter_->acquire(tenant_));
  const WarmupResult warmup = scheduler_.warm_up();
  if (warmup.ok) {
    spdlog::info(
        "warm-up: a step of 1 decode {:.1f} ms, of {} decodes {:.1f} ms, a prompt token {:.2f} "
        "ms ({}-token chunk; {:.2f} ms in chunks under 64), a row {:.2f} us per KV cell it "
        "attends (measured up to {} cells); {:.2f} s",
        warmup.decode_one_ms, warmup.sequences, warmup.decode_full_ms,
        warmup.prefill_ms_per_token, warmup.prompt_chunk_tokens,
        warmup.small_chunk_prefill_ms_per_token, warmup.row_cell_ms * 1000,
        warmup.filled_cells, warmup.seconds);
  } else {
    spdlog::warn("warm-up: no step cost measured; the first requests' waits are unpriced");
  }
}

SubmitStatus EngineLoop::submit(std::shared_ptr<Request> request, double* estimated_wait_ms) {
  std::vector<std::shared_ptr<Request>> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one), estimated_wait_ms);
}

SubmitStatus EngineLoop::submit_all(std::vector<std::shared_ptr<Request>> requests,
                                    double* estimated_wait_ms) {
  Newcomer newcomer;
  newcomer.count = static_cast<int>(requests.size());
  int prompt_tokens = 0;
  for (const auto& request : requests) {
    prompt_tokens += queued_prefill_tokens(*request);
    // The most any of them named (0: none named).
    if (request->max_tokens_named) newcomer.max_tokens = std::max(newcomer.max_tokens, request->max_tokens);
  }
  if (!requests.empty()) {
    newcomer.prompt_tokens = std::max(1, prompt_tokens / newcomer.count);
    newcomer.priority = requests.front()->priority;
  }
  // One admission at a time: each forecast sees the requests admitted before it.
  std::lock_guard admission(admission_mutex_);
  double forecast_ms = -1;
  const SubmitStatus status = check_wait(newcomer, prompt_tokens, &forecast_ms);
  if (estimated_wait_ms) *estimated_wait_ms = std::max(0.0, forecast_ms);
  if (status != SubmitStatus::accepted) return status;
  if (forecast_ms >= 0 && !requests.empty()) {
    spdlog::debug("request {}: {} prompt tokens, admitted on a forecast wait of {:.0f} ms",
                  requests.front()->id, prompt_tokens, forecast_ms);
  }
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return SubmitStatus::shutting_down;
    submitted_prompt_tokens_ += prompt_tokens;
    for (auto& request : requests) submitted_.push_back(std::move(request));
    ++state_version_;
  }
  work_available_.notify_one();
  return SubmitStatus::accepted;
}

SubmitStatus EngineLoop::precheck(double* estimated_wait_ms) const {
  std::lock_guard admission(admission_mutex_);
  return check_wait(Newcomer{}, 0, estimated_wait_ms);
}

// The queue's limits under the lock, then the forecast of the wait outside it (the engine
// thread publishes its reports meanwhile). A one-token newcomer's forecast is kept until the
// state changes: under overload the refusals cost a lookup, not a simulation, and a newcomer
// that would wait longer than the limit even with a one-token prompt is refused at once.
SubmitStatus EngineLoop::check_wait(const Newcomer& newcomer, int prompt_tokens,
                                    double* estimated_wait_ms) const {
  LiveLoad load;
  std::vector<ForecastRequest> submitted;
  uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    if (!accepting_) return SubmitStatus::shutting_down;
    const int queued_requests = static_cast<int>(submitted_.size()) + report_.waiting;
    const int queued_tokens = submitted_prompt_tokens_ + report_.waiting_prompt_tokens;
    // Those a free sequence takes at the next step do not wait: three requests at once to an
    // idle --max-seqs 1 --max-queued-requests 2 server refused the third while the first was
    // still handed over, not yet started (CI, test_ready_is_503_while_the_queue_is_full).
    const int will_wait = std::max(0, queued_requests - report_.load.free_slots);
    // A group that would not fit even in an empty queue is taken when the queue is empty.
    if (will_wait >= options_.max_queued_requests ||
        (will_wait > 0 && will_wait + newcomer.count > options_.max_queued_requests)) {
      return SubmitStatus::queue_full;
    }
    if (options_.max_queued_tokens > 0 && queued_requests > 0 &&
        queued_tokens + prompt_tokens > options_.max_queued_tokens) {
      return SubmitStatus::queued_tokens_full;
    }
    const bool idle = queued_requests == 0 && report_.running == 0 && report_.preempted == 0;
    if (options_.max_queue_delay_ms <= 0 || idle) return SubmitStatus::accepted;
    version = state_version_;
    if (forecast_memo_.version != version) {
      load = report_.load;
      const TimePoint now = options_.clock();
      for (const auto& request : submitted_) {
        submitted.push_back(queued_forecast_request(*request, load.mean_output_tokens, now));
      }
    }
  }
  const double limit_ms = options_.max_queue_delay_ms;
  const auto refuse_over_limit = [&](double wait_ms) {
    if (estimated_wait_ms) *estimated_wait_ms = wait_ms;
    return wait_ms > limit_ms ? SubmitStatus::queue_delay : SubmitStatus::accepted;
  };
  if (forecast_memo_.version != version) {
    WaitForecast base = forecast_waits(forecast_options_, load, submitted, Newcomer{}, limit_ms);
    forecast_memo_ = ForecastMemo{version, std::move(load), std::move(submitted), std::move(base)};
  }
  const ForecastMemo& memo = forecast_memo_;
  if (memo.base.newcomer_ms > limit_ms || prompt_tokens == 0) {
    return refuse_over_limit(memo.base.newcomer_ms);
  }
  const WaitForecast with =
      forecast_waits(forecast_options_, memo.load, memo.submitted, newcomer, limit_ms);
  if (with.newcomer_ms > limit_ms) return refuse_over_limit(with.newcomer_ms);
  // Nor is a promise broken: a request ahead that would start within the limit must still do
  // so with the newcomer among them, and one already past it must not come later still (a short
  // prompt goes before the long ones waiting: a cold burst's short prompts pushed the long ones
  // admitted before them to 50 s, and 64 closed-loop users, once one was late, to 90 s).
  for (size_t i = 0; i < with.ahead_ms.size() && i < memo.base.ahead_ms.size(); ++i) {
    const double pushed = with.ahead_ms[i];
    const double before = memo.base.ahead_ms[i];
    if (pushed <= limit_ms) continue;
    // Past the horizon in both: the newcomer, served within it, goes before that one.
    const bool overtakes_a_late_one = std::isinf(pushed) && std::isinf(before);
    if (before <= limit_ms || pushed > before + kPushToleranceMs || overtakes_a_late_one) {
      // Retry once that request is served: about what it would be pushed past the limit.
      const double over_ms = std::min(pushed, 2 * limit_ms) - limit_ms;
      return refuse_over_limit(limit_ms + std::max(1000.0, over_ms));
    }
  }
  return refuse_over_limit(with.newcomer_ms);
}

void EngineLoop::wake() {
  {
    std::lock_guard lock(mutex_);
    wake_pending_ = true;
  }
  work_available_.notify_one();
}

// The engine thread decides when the drain is over, so nothing admitted before `accepting_`
// fell is lost.
void EngineLoop::shutdown(std::chrono::milliseconds drain_timeout) {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    if (!draining_ || Clock::now() + drain_timeout < drain_deadline_) {
      drain_deadline_ = Clock::now() + drain_timeout;
    }
    draining_ = true;
  }
  work_available_.notify_one();
  if (engine_thread_.joinable()) engine_thread_.join();
}

SchedulerStats EngineLoop::stats() const {
  SchedulerStats stats;
  std::lock_guard lock(mutex_);
  stats.running = report_.running;
  stats.waiting = static_cast<int>(submitted_.size()) + report_.waiting + report_.preempted;
  stats.preempted = report_.preempted;
  stats.max_waiting = options_.max_queued_requests;
  stats.free_sequences = report_.load.free_slots;
  stats.admission_blocked = report_.snapshot.admission_blocked;
  stats.kv_committed_cells = report_.snapshot.kv.committed_cells;
  stats.prefix_cache_cells = report_.prefix_cache_cells;
  stats.kv_capacity_cells = scheduler_.kv_capacity_cells();
  stats.kv_running_cells = report_.kv_running_cells;
  stats.prefix_cache_sequences = report_.prefix_cache_sequences;
  stats.kv_cache_usage_ratio =
      stats.kv_capacity_cells > 0
          ? static_cast<double>(report_.kv_running_cells) / stats.kv_capacity_cells
          : 0.0;
  return stats;
}

SchedulerSnapshot EngineLoop::snapshot() const {
  std::lock_guard lock(mutex_);
  SchedulerSnapshot out = report_.snapshot;
  const TimePoint now = options_.clock();
  out.taken_at = now;
  // Requests handed over since the report are in its count, not yet in its list.
  out.waiting_total = report_.waiting + static_cast<int>(submitted_.size());
  for (const auto& request : submitted_) {
    if (static_cast<int>(out.waiting.size()) >= SchedulerSnapshot::kMaxWaitingShown) break;
    out.waiting.push_back({request->id, request->priority,
                           static_cast<int>(request->prompt_tokens.size()), request->arrival,
                           request->deadline_ms, WaitReason::not_yet_considered});
  }
  for (WaitingView& waiting : out.waiting) waiting.waited_ms = ms_between(waiting.arrival, now);
  return out;
}

void EngineLoop::receive(SchedulerReport&& report) {
  std::lock_guard lock(mutex_);
  report_ = std::move(report);
  ++state_version_;
}

void EngineLoop::run() {
  // With a shared device the turn is held from step to step while there is work: between
  // steps the arbiter may hand it to a model that goes first.
  std::optional<DeviceArbiter::Turn> turn;
  while (wait_for_work(turn)) {
    if (arbiter_ && turn) {
      arbiter_->between_steps(*turn);
    } else if (arbiter_) {
      turn.emplace(arbiter_->acquire(tenant_));
    }
    try {
      scheduler_.step();
    } catch (const std::exception& e) {
      scheduler_.fail_running(e.what());
    }
  }
  turn.reset();
  // The drain is over: cancel everything still here.
  {
    std::lock_guard lock(mutex_);
    for (auto& request : submitted_) scheduler_.enqueue(std::move(request));
    submitted_.clear();
    submitted_prompt_tokens_ = 0;
  }
  scheduler_.cancel_all();
}

// Blocks (without the device's turn) while there is nothing to do, then hands the submitted requests to the scheduler; false
// once the loop should stop: draining, and either out of work or past the drain's deadline.
bool EngineLoop::wait_for_work(std::optional<DeviceArbiter::Turn>& turn) {
  std::unique_lock lock(mutex_);
  for (;;) {
    const bool idle = scheduler_.idle() && submitted_.empty();
    if (draining_ && (idle || Clock::now() >= drain_deadline_)) return false;
    if (!idle || wake_pending_) break;
    turn.reset();  // idle: the device is the other models'
    if (draining_) {
      work_available_.wait_until(lock, drain_deadline_);
    } else {
      work_available_.wait(lock);
    }
  }
  wake_pending_ = false;
  report_.waiting += static_cast<int>(submitted_.size());
  report_.waiting_prompt_tokens += submitted_prompt_tokens_;
  // Until the next report, the forecast sees them where they now are.
  const TimePoint now = options_.clock();
  for (const auto& request : submitted_) {
    report_.load.waiting.push_back(
        queued_forecast_request(*request, report_.load.mean_output_tokens, now));
  }
  if (!submitted_.empty()) ++state_version_;
  for (auto& request : submitted_) scheduler_.enqueue(std::move(request));
  submitted_.clear();
  submitted_prompt_tokens_ = 0;
  return true;
}

}  // namespace brisk
