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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

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

// A server that refuses requests with 429 and Retry-After: 1, on keep-alive connections: every
// one, or only the first `refusals` (then it answers each with a one-token completion).
class RefusingServer {
 public:
  explicit RefusingServer(int refusals = -1) : refusals_(refusals) {

    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(listener_, 16);
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RefusingServer() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
    {
      std::lock_guard lock(mutex_);
      for (const int connection : open_) shutdown(connection, SHUT_RDWR);
    }
    for (std::thread& connection : connections_) connection.join();
    for (const int connection : open_) close(connection);
  }
  int port() const { return port_; }
  int answered() const { return answered_; }

 private:
  // Each connection on its own thread: a client that opens a second connection while its first
  // stays open (an open loop's next request due before the last one's answer) is answered too.
  // Served one at a time, the second waited for the client's 300 s timeout (ASan CI, 2026-12-07).
  void serve() {
    while (!stopping_) {
      const int connection = accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      std::lock_guard lock(mutex_);
      open_.push_back(connection);
      connections_.emplace_back([this, connection] { converse(connection); });
    }
  }

  // Answers the connection's requests until the client closes it (the destructor closes it).
  void converse(int connection) {
    {
      std::string pending;
      char buffer[4096];
      for (;;) {
        const size_t header_end = pending.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          size_t body = 0;
          const size_t length_at = pending.find("Content-Length: ");
          if (length_at != std::string::npos && length_at < header_end) {
            body = std::stoul(pending.substr(length_at + 16));
          }
          if (pending.size() >= header_end + 4 + body) {
            pending.erase(0, header_end + 4 + body);
            const bool refuse = refusals_ < 0 || decided_++ < refusals_;
            const std::string completion =
                R"({"choices":[{"index":0,"text":"x","finish_reason":"length"}],)"
                R"("usage":{"prompt_tokens":1,"completion_tokens":1}})";
            const std::string answer =
                refuse ? "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: "
                         "application/json\r\nContent-Length: 2\r\n\r\n{}"
                       : "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(completion.size()) + "\r\n\r\n" + completion;
            if (write(connection, answer.data(), answer.size()) < 0) break;
            ++answered_;
            continue;
          }
        }
        const ssize_t got = read(connection, buffer, sizeof(buffer));
        if (got <= 0) break;
        pending.append(buffer, static_cast<size_t>(got));
      }
    }
  }

  const int refusals_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> answered_{0};
  std::atomic<int> decided_{0};  // answers chosen so far, the first `refusals_` of them 429s
  std::thread thread_;
  std::mutex mutex_;
  std::vector<int> open_;  // connections, for the destructor to end
  std::vector<std::thread> connections_;
};

class OnePrompt : public Workload {
 public:
  CompletionRequest request(int, int) const override {
    return {"/v1/completions", R"({"prompt": "hi", "max_tokens": 1})", false};
  }
  ApiKind kind() const override { return ApiKind::completions; }
};

RunResult refused_for(double seconds, bool honour) {
  RefusingServer server;
  TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = std::to_string(server.port());
  RunOptions options;
  options.load.concurrency = 1;
  options.warmup_requests = 0;
  options.duration_s = seconds;
  options.honour_retry_after = honour;
  return run_closed_loop(target, OnePrompt{}, options);
}

TEST(LoadRunner, AClosedLoopUserWaitsARefusalsRetryAfter) {
  const RunResult honoured = refused_for(1.5, true);
  // Sent at 0 s and after the 1 s Retry-After; the run ends at 1.5 s.
  ASSERT_GE(honoured.records.size(), 1u);
  EXPECT_LE(honoured.records.size(), 2u);
  EXPECT_EQ(honoured.records.front().error, RequestError::http_429);
  EXPECT_EQ(honoured.records.front().retry_after_s, 1.0);
  // Ignored, the user resends at once: a storm.
  const RunResult ignored = refused_for(0.5, false);
  EXPECT_GE(ignored.records.size(), 20u);
}

// An open loop's warm-up request that the server sheds (a server still cancelling the previous
// run's backlog: brisk tune abandons overloaded trials) is sent again every 250 ms until it is
// served, so the measured requests meet a server that has caught up.
TEST(LoadRunner, AnOpenLoopsWarmupIsSentAgainWhileTheServerShedsIt) {
  RefusingServer server(3);
  TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = std::to_string(server.port());
  RunOptions options;
  options.load.concurrency = 0;
  options.load.rate = 100;
  options.num_requests = 2;
  options.warmup_requests = 1;
  const TimePoint began = Clock::now();
  const RunResult result = run_open_loop(target, OnePrompt{}, options, 1);
  ASSERT_EQ(result.records.size(), 3u);
  EXPECT_TRUE(result.records[0].warmup);
  EXPECT_EQ(result.records[0].http_status, 200) << "the warm-up's last answer";
  EXPECT_EQ(server.answered(), 3 + 3) << "3 refusals, then the warm-up and 2 measured requests";
  for (size_t i = 1; i < result.records.size(); ++i) {
    EXPECT_EQ(result.records[i].http_status, 200) << "measured request " << i;
  }
  EXPECT_GE(ms_between(began, Clock::now()), 3 * 250.0) << "three pauses between the tries";
}

}  // namespace
}  // namespace brisk::bench
