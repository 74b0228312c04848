#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/request_trace.h"

namespace brisk {

// brisk serve --trace-out: one JSON line per finished request (docs/trace.md), written by a
// thread of its own so that no I/O thread ever waits for the disk. Lines wait in a bounded
// queue; when it is full, or a write fails (a full disk), the line is dropped and counted
// (brisk_trace_lines_dropped_total), and serving goes on.
class TraceWriter {
 public:
  struct Options {
    std::string path;
    int block_tokens = kDefaultTraceBlockTokens;  // tokens per prefix hash
    bool include_text = false;                    // --trace-text: the prompt's text too
    size_t max_queued_lines = 4096;
  };

  // Opens (appends to) `options.path`; null with `error` when it cannot.
  static std::unique_ptr<TraceWriter> open(Options options, std::string& error);
  ~TraceWriter();  // writes what is queued, then closes
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  const Options& options() const { return options_; }
  // The zero of every record's arrival_s.
  TimePoint start() const { return start_; }

  // Queues one line; never blocks on the disk.
  void write(const TraceRecord& record);
  // Closes the file and opens the path anew, after a rotation moved it away (SIGHUP).
  void reopen();

  uint64_t lines_written() const { return written_.load(); }
  uint64_t lines_dropped() const { return dropped_.load(); }
  // brisk_trace_lines_written_total, brisk_trace_lines_dropped_total and brisk_trace_reopens_total.
  std::string render_prometheus() const;

 private:
  TraceWriter(Options options, std::FILE* file);
  void run();

  Options options_;
  TimePoint start_;
  std::FILE* file_;  // only the writer thread touches it after construction
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> queue_;
  bool stop_ = false;
  bool reopen_ = false;
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> reopens_{0};
  std::thread thread_;
};

}  // namespace brisk
