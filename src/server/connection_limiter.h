#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace brisk {

// Counts open client connections against --max-connections, and those busy with a request. A
// connection holds a Slot for its lifetime; when none is left the server answers 503 and closes
// instead of letting connections, and the file descriptors behind them, grow without bound.
// The drain waits for busy connections, so a finished response is written before the exit, and
// marks every connection closing: each closes after its current response instead of waiting for
// another request from a client (or a load balancer's idle pool) the server will not serve.
class ConnectionLimiter {
 public:
  // Releases its place when destroyed.
  class Slot {
   public:
    explicit Slot(ConnectionLimiter& limiter) : limiter_(limiter) {}
    ~Slot() {
      set_busy(false);
      limiter_.open_.fetch_sub(1);
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    // Busy from a request's last byte read until its response's last byte is written.
    void set_busy(bool busy) {
      if (busy == busy_) return;
      busy_ = busy;
      limiter_.busy_.fetch_add(busy ? 1 : -1);
    }
    // The server is draining: answer with `Connection: close` and close after the response.
    bool server_closing() const { return limiter_.closing(); }

   private:
    ConnectionLimiter& limiter_;
    bool busy_ = false;
  };

  explicit ConnectionLimiter(int max_connections) : max_connections_(max_connections) {}

  // A place for one more connection, or null (counted as refused) when all are taken.
  std::unique_ptr<Slot> try_acquire();

  int open() const { return open_.load(); }
  int busy() const { return busy_.load(); }
  int max_connections() const { return max_connections_; }
  void begin_closing() { closing_.store(true); }
  bool closing() const { return closing_.load(); }
  // brisk_http_connections (gauge) and brisk_http_connections_refused_total, for /metrics.
  std::string render_prometheus() const;

 private:
  const int max_connections_;
  std::atomic<int> open_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> closing_{false};
  std::atomic<uint64_t> accepted_total_{0};
  std::atomic<uint64_t> refused_total_{0};
};

}  // namespace brisk
