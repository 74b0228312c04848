// brisk bench's load runner: a failure inside a run's coroutines ends the run loudly.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench/load_runner.h"

namespace brisk::bench {
namespace {

// Builds its requests lazily, as a --duration run does, and fails at the first: a stand-in for
// any exception in a request's coroutine (nothing in the request path is expected to throw).
class FailingWorkload : public Workload {
 public:
  CompletionRequest request(int, int) const override {
    throw std::runtime_error("no request for you");
  }
  ApiKind kind() const override { return ApiKind::completions; }
};

TEST(LoadRunner, AnExceptionInAVirtualUserEndsTheRunInsteadOfVanishing) {
  // Spawned detached, the exception was dropped with its coroutine: the run "finished" with no
  // request and no error, and under --max-concurrency the slot it held was never released.
  TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = "9";  // nothing listens: connections are refused and counted, not thrown
  RunOptions options;
  options.load.concurrency = 2;
  options.warmup_requests = 0;
  options.duration_s = 5;
  // On its own thread: the detached version never returned, and a hung test must still fail.
  auto outcome = std::make_shared<std::promise<std::string>>();
  std::future<std::string> finished = outcome->get_future();
  std::thread([target, options, outcome] {
    try {
      run_closed_loop(target, FailingWorkload{}, options);
      outcome->set_value("returned normally");
    } catch (const std::runtime_error& error) {
      outcome->set_value(error.what());
    }
  }).detach();
  if (finished.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    // The runner's thread still holds its io_context: end the process, saying why.
    std::fprintf(stderr, "FAILED: the run neither failed nor returned within 30 s\n");
    std::fflush(nullptr);
    std::_Exit(1);
  }
  EXPECT_EQ(finished.get(), "no request for you");
}

// Seen in brisk doctor's reports: a load point its budget cut short listed the requests it never
// sent as successes of 0 ms.
TEST(LoadRunner, RequestsADeadlineLeftUnstartedAreNotResults) {
  TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = "9";  // nothing listens; nothing is sent anyway
  RunOptions options;
  options.load.concurrency = 2;
  options.warmup_requests = 0;
  options.num_requests = 8;
  options.stop_starting_at = Clock::now();
  class Prompts : public Workload {
   public:
    CompletionRequest request(int, int) const override { return {"/v1/completions", "{}", true}; }
    ApiKind kind() const override { return ApiKind::completions; }
  };
  const RunResult result = run_closed_loop(target, Prompts{}, options);
  EXPECT_TRUE(result.records.empty());
}

}  // namespace
}  // namespace brisk::bench
