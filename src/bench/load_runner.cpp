#include "bench/load_runner.h"

#include <exception>
#include <memory>

#include "bench/openai_client.h"

// GCC 12 flags Boost 1.74's coroutine-frame allocator (operator new paired with a sized class
// delete) as mismatched; the pairing is intended, see boost/asio/impl/awaitable.hpp.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace brisk::bench {

namespace {

// State shared by the virtual users of one phase; the io_context is single-threaded, so plain
// integers suffice.
struct Phase {
  const std::vector<CompletionRequest>* requests;
  std::vector<RequestRecord>* records;
  int next = 0;
  int end = 0;
  int warmup_end = 0;
};

net::awaitable<void> virtual_user(OpenAiConnection& connection, Phase& phase) {
  while (phase.next < phase.end) {
    const int index = phase.next++;
    RequestRecord& record = (*phase.records)[index];
    record.index = index;
    record.warmup = index < phase.warmup_end;
    record.scheduled = Clock::now();  // closed loop: due the moment the previous one ended
    co_await connection.send((*phase.requests)[index], record);
  }
}

void rethrow_if_failed(std::exception_ptr error) {
  if (error) std::rethrow_exception(error);
}

}  // namespace

RunResult run_closed_loop(const TargetEndpoint& target, const SyntheticWorkload& workload,
                          const RunOptions& options) {
  const int warmup = std::max(0, options.warmup_requests);
  const int total = warmup + std::max(0, options.num_requests);
  // Bodies are built before the clock starts, so prompt generation never delays a send.
  std::vector<CompletionRequest> requests;
  requests.reserve(total);
  for (int i = 0; i < total; ++i) requests.push_back(workload.request(options.run_index, i));

  RunResult result;
  result.load = options.load;
  result.records.resize(total);

  net::io_context io;
  std::vector<std::unique_ptr<OpenAiConnection>> users;
  for (int u = 0; u < std::max(1, options.load.concurrency); ++u) {
    users.push_back(std::make_unique<OpenAiConnection>(io.get_executor(), target,
                                                       workload.options().kind, options.timeout));
  }
  auto run_phase = [&](int first, int last) {
    Phase phase{&requests, &result.records, first, last, warmup};
    for (auto& user : users) net::co_spawn(io, virtual_user(*user, phase), rethrow_if_failed);
    io.run();
    io.restart();
  };

  run_phase(0, warmup);
  result.start = Clock::now();
  run_phase(warmup, total);
  result.end = Clock::now();
  return result;
}

}  // namespace brisk::bench
