#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "bench/load_runner.h"
#include "bench/openai_client.h"

// GCC 12 flags Boost 1.74's coroutine-frame allocator as mismatched; see load_runner.cpp.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace brisk::bench {
namespace {

constexpr std::chrono::seconds kWarmupRetryLimit{30};

// Idle keep-alive connections, opened on demand up to `cap` (0: no cap). Only the dispatcher
// acquires, so at most one coroutine ever waits for a release.
class ConnectionPool {
 public:
  ConnectionPool(net::any_io_executor executor, const TargetEndpoint& target, ApiKind kind,
                 std::chrono::milliseconds timeout, int cap)
      : executor_(executor),
        target_(target),
        kind_(kind),
        timeout_(timeout),
        cap_(cap),
        released_(executor, TimePoint::max()) {}

  net::awaitable<std::unique_ptr<OpenAiConnection>> acquire() {
    while (true) {
      if (!idle_.empty()) {
        auto connection = std::move(idle_.back());
        idle_.pop_back();
        co_return connection;
      }
      if (cap_ <= 0 || opened_ < cap_) {
        ++opened_;
        co_return std::make_unique<OpenAiConnection>(executor_, target_, kind_, timeout_);
      }
      boost::system::error_code ignored;  // woken by cancel_one() in release()
      co_await released_.async_wait(net::redirect_error(net::use_awaitable, ignored));
    }
  }

  // Opens idle connections until `count` exist (or the cap is reached).
  net::awaitable<void> open(int count) {
    while (opened_ < count && (cap_ <= 0 || opened_ < cap_)) {
      ++opened_;
      idle_.push_back(std::make_unique<OpenAiConnection>(executor_, target_, kind_, timeout_));
      co_await idle_.back()->open();
    }
  }

  void release(std::unique_ptr<OpenAiConnection> connection) {
    idle_.push_back(std::move(connection));
    released_.cancel_one();
  }

 private:
  net::any_io_executor executor_;
  const TargetEndpoint& target_;
  ApiKind kind_;
  std::chrono::milliseconds timeout_;
  int cap_;
  int opened_ = 0;
  std::vector<std::unique_ptr<OpenAiConnection>> idle_;
  net::steady_timer released_;
};

// Requests of the measured phase in flight, for in_flight_at_send and the progress display.
struct InFlight {
  int count = 0;
  PhaseCounters* progress = nullptr;
};

net::awaitable<void> send_then_release(ConnectionPool& pool,
                                       std::unique_ptr<OpenAiConnection> connection,
                                       const CompletionRequest& request, RequestRecord& record,
                                       InFlight& in_flight) {
  co_await connection->send(request, record);
  pool.release(std::move(connection));
  --in_flight.count;
  if (in_flight.progress) count_finished(*in_flight.progress, in_flight.count, record.ok());
}

net::awaitable<void> dispatch(ConnectionPool& pool, const std::vector<CompletionRequest>& requests,
                              std::vector<RequestRecord>& records, int first, TimePoint start,
                              const std::vector<double>& offsets_s, InFlight& in_flight) {
  auto executor = co_await net::this_coro::executor;
  net::steady_timer due(executor);
  for (int i = first; i < static_cast<int>(requests.size()); ++i) {
    RequestRecord& record = records[i];
    record.index = i;
    record.scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(offsets_s[i - first]));
    due.expires_at(record.scheduled);
    co_await due.async_wait(net::use_awaitable);
    auto connection = co_await pool.acquire();
    // Counted once it has a connection: a request held back by --max-concurrency is waiting,
    // not in flight.
    record.in_flight_at_send = ++in_flight.count;
    if (in_flight.progress) {
      in_flight.progress->in_flight.store(in_flight.count, std::memory_order_relaxed);
    }
    net::co_spawn(executor,
                  send_then_release(pool, std::move(connection), requests[i], record, in_flight),
                  rethrow_if_failed);
  }
}

// Asks options.abandon_if every 50 ms until the run ends or it answers; then stops `io`.
net::awaitable<void> watch_for_abandon(net::io_context& io, const RunOptions& options,
                                       const std::vector<RequestRecord>& records,
                                       const bool& dispatching, const InFlight& in_flight,
                                       std::string& abandoned) {
  net::steady_timer tick(co_await net::this_coro::executor);
  while (dispatching || in_flight.count > 0) {
    tick.expires_after(std::chrono::milliseconds(50));
    co_await tick.async_wait(net::use_awaitable);
    if (!dispatching && in_flight.count == 0) break;
    abandoned = options.abandon_if(records, Clock::now());
    if (!abandoned.empty()) {
      io.stop();
      co_return;
    }
  }
}

// The records of an abandoned run: requests in flight fail as abandoned, those never sent are
// left out.
void settle_abandoned(RunResult& result, TimePoint now) {
  for (RequestRecord& record : result.records) {
    if (record.warmup || record.sent == TimePoint{} || record.end != TimePoint{}) continue;
    record.fail(RequestError::abandoned, "the run was abandoned: " + result.abandoned);
    record.end = now;
  }
  std::erase_if(result.records, [](const RequestRecord& record) {
    return !record.warmup && record.sent == TimePoint{};
  });
}

}  // namespace

std::vector<double> arrival_offsets_s(const LoadPoint& load, int count, uint64_t seed) {
  return brisk::arrival_offsets_s(load.arrival_pattern(), count, seed);
}

std::vector<double> arrival_offsets_within_s(const LoadPoint& load, double duration_s,
                                             uint64_t seed) {
  return brisk::arrival_offsets_within_s(load.arrival_pattern(), duration_s, seed);
}

RunResult run_open_loop(const TargetEndpoint& target, const Workload& workload,
                        const RunOptions& options, uint64_t seed) {
  const int warmup = std::max(0, options.warmup_requests);
  const std::vector<double> offsets =
      !options.schedule_s.empty()
          ? options.schedule_s
          : options.duration_s ? arrival_offsets_within_s(options.load, *options.duration_s, seed)
                               : arrival_offsets_s(options.load, options.num_requests, seed);
  const int total = warmup + static_cast<int>(offsets.size());
  std::vector<CompletionRequest> requests;
  requests.reserve(total);
  for (int i = 0; i < total; ++i) requests.push_back(workload.request(options.run_index, i));

  RunResult result;
  result.load = options.load;
  result.records.resize(total);
  {  // the io_context ends here: an abandoned run's suspended requests with it
    net::io_context io;
    ConnectionPool pool(io.get_executor(), target, workload.kind(), options.timeout,
                        options.load.concurrency);

    // Warmup: one request at a time, so the server and the connections are warm. One the
    // server sheds (429, 503) is sent again every 250 ms, for up to kWarmupRetryLimit: a server
    // still cancelling the previous run's backlog (brisk tune abandons an overloaded trial)
    // would otherwise meet the measured phase with it.
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          auto connection = co_await pool.acquire();
          net::steady_timer pause(co_await net::this_coro::executor);
          const TimePoint retry_until = Clock::now() + kWarmupRetryLimit;
          for (int i = 0; i < warmup; ++i) {
            RequestRecord& record = result.records[i];
            for (;;) {
              record = RequestRecord{};
              record.index = i;
              record.warmup = true;
              record.in_flight_at_send = 1;
              record.scheduled = Clock::now();
              co_await connection->send(requests[i], record);
              const bool shed = record.http_status == 429 || record.http_status == 503;
              if (!shed || Clock::now() >= retry_until) break;
              pause.expires_after(std::chrono::milliseconds(250));
              co_await pause.async_wait(net::use_awaitable);
            }
          }
          pool.release(std::move(connection));
        },
        rethrow_if_failed);
    drive(io, options.busy_poll);
    io.restart();

    // A burst sends everything at once: its connections are opened before the clock starts, as a
    // closed loop's are. A Poisson run opens them as it needs them, and its requests pay for that
    // (new_connection), as a real client's would.
    if (std::isinf(options.load.rate)) {
      net::co_spawn(io, pool.open(static_cast<int>(offsets.size())), rethrow_if_failed);
      drive(io, options.busy_poll);
      io.restart();
    }

    InFlight in_flight{0, options.progress};
    bool dispatching = true;
    result.start = Clock::now();
    if (options.progress) ProgressDisplay::mark_measured_start(*options.progress, result.start);
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          co_await dispatch(pool, requests, result.records, warmup, result.start, offsets,
                            in_flight);
          dispatching = false;
        },
        rethrow_if_failed);
    if (options.abandon_if) {
      net::co_spawn(io,
                    watch_for_abandon(io, options, result.records, dispatching, in_flight,
                                      result.abandoned),
                    rethrow_if_failed);
    }
    drive(io, options.busy_poll);
    result.end = Clock::now();
    if (options.abandon_if && result.abandoned.empty()) {
      // The watcher outlives the last answer by up to one tick: the run ended with that answer.
      result.end = result.start;
      for (const RequestRecord& record : result.records) {
        if (!record.warmup) result.end = std::max(result.end, record.end);
      }
    }
  }
  if (!result.abandoned.empty()) settle_abandoned(result, result.end);
  return result;
}

}  // namespace brisk::bench
