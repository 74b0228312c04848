#include "bench/load_runner.h"

#include <deque>
#include <exception>
#include <limits>
#include <memory>

#include "bench/openai_client.h"

// GCC 12 flags Boost 1.74's coroutine-frame allocator (operator new paired with a sized class
// delete) as mismatched; the pairing is intended, see boost/asio/impl/awaitable.hpp.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace brisk::bench {

namespace {

// State shared by the virtual users of one phase; the io_context is single-threaded, so plain
// integers suffice. Deques, because a --duration run adds requests while users hold references
// to earlier records.
struct Phase {
  const Workload* workload;
  int run_index = 0;
  std::deque<CompletionRequest>* requests;
  std::deque<RequestRecord>* records;
  int next = 0;
  int end = 0;
  int warmup_end = 0;
  TimePoint deadline = TimePoint::max();  // no request starts at or after it
  int in_flight = 0;
  PhaseCounters* progress = nullptr;
  bool honour_retry_after = true;
};

net::awaitable<void> virtual_user(OpenAiConnection& connection, Phase& phase) {
  while (phase.next < phase.end && Clock::now() < phase.deadline) {
    const int index = phase.next++;
    if (index == static_cast<int>(phase.records->size())) {  // a --duration run grows as it goes
      phase.requests->push_back(phase.workload->request(phase.run_index, index));
      phase.records->emplace_back();
    }
    RequestRecord& record = (*phase.records)[index];
    record.index = index;
    record.warmup = index < phase.warmup_end;
    record.in_flight_at_send = ++phase.in_flight;
    if (phase.progress) phase.progress->in_flight.store(phase.in_flight, std::memory_order_relaxed);
    record.scheduled = Clock::now();  // closed loop: due the moment the previous one ended
    co_await connection.send((*phase.requests)[index], record);
    --phase.in_flight;
    if (phase.progress) count_finished(*phase.progress, phase.in_flight, record.ok());
    if (phase.honour_retry_after && record.retry_after_s > 0) {
      net::steady_timer pause(co_await net::this_coro::executor);
      const TimePoint resume = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(
                                                      std::min(record.retry_after_s, 3600.0)));
      pause.expires_at(std::min(resume, phase.deadline));
      beast::error_code ignored;
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ignored));
    }
  }
}

}  // namespace

void rethrow_if_failed(std::exception_ptr error) {
  if (error) std::rethrow_exception(error);
}

void drive(net::io_context& io, bool busy_poll) {
  if (!busy_poll) {
    io.run();
    return;
  }
  while (!io.stopped()) io.poll();
}

void count_finished(PhaseCounters& counters, int in_flight, bool ok) {
  counters.in_flight.store(in_flight, std::memory_order_relaxed);
  counters.finished.fetch_add(1, std::memory_order_relaxed);
  if (!ok) counters.failed.fetch_add(1, std::memory_order_relaxed);
}

RunResult run_closed_loop(const TargetEndpoint& target, const Workload& workload,
                          const RunOptions& options) {
  const int warmup = std::max(0, options.warmup_requests);
  const int total = options.duration_s ? std::numeric_limits<int>::max()
                                       : warmup + std::max(0, options.num_requests);
  // Bodies are built before the clock starts, so prompt generation never delays a send (a
  // --duration run builds them as it goes, between a user's requests).
  const int prebuilt = options.duration_s ? warmup : total;
  std::deque<CompletionRequest> requests;
  for (int i = 0; i < prebuilt; ++i) requests.push_back(workload.request(options.run_index, i));
  std::deque<RequestRecord> records(prebuilt);

  RunResult result;
  result.load = options.load;

  net::io_context io;
  std::vector<std::unique_ptr<OpenAiConnection>> users;
  for (int u = 0; u < std::max(1, options.load.concurrency); ++u) {
    users.push_back(std::make_unique<OpenAiConnection>(io.get_executor(), target, workload.kind(),
                                                       options.timeout));
  }
  // Returns the index of the first request it did not start.
  auto run_phase = [&](int first, int last, TimePoint deadline, PhaseCounters* progress) {
    Phase phase{&workload, options.run_index, &requests, &records, first, last,
                warmup,    deadline,          0,         progress,
                options.honour_retry_after};
    for (auto& user : users) net::co_spawn(io, virtual_user(*user, phase), rethrow_if_failed);
    drive(io, options.busy_poll);
    io.restart();
    return phase.next;
  };

  run_phase(0, warmup, TimePoint::max(), nullptr);
  // Every user's connection is open before the clock starts, not only those the warmup used:
  // otherwise the warm users' first requests leave before the others, and a burst is staggered.
  for (auto& user : users) net::co_spawn(io, user->open(), rethrow_if_failed);
  drive(io, options.busy_poll);
  io.restart();
  result.start = Clock::now();
  if (options.progress) ProgressDisplay::mark_measured_start(*options.progress, result.start);
  const TimePoint deadline = std::min(
      options.stop_starting_at,
      options.duration_s ? result.start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(*options.duration_s))
                         : TimePoint::max());
  const int started = run_phase(warmup, total, deadline, options.progress);
  result.end = Clock::now();
  // Requests prebuilt but never started (the deadline came first) were never sent: they are not
  // results, and left in they would count as successes of 0 ms.
  records.resize(std::min(records.size(), static_cast<size_t>(started)));
  result.records.assign(std::make_move_iterator(records.begin()),
                        std::make_move_iterator(records.end()));
  return result;
}

}  // namespace brisk::bench
