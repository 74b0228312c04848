#include "server/trace_writer.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace brisk {

std::unique_ptr<TraceWriter> TraceWriter::open(Options options, std::string& error) {
  if (options.block_tokens <= 0) {
    error = fmt::format("--trace-block-tokens must be at least 1, got {}", options.block_tokens);
    return nullptr;
  }
  std::FILE* file = std::fopen(options.path.c_str(), "a");
  if (!file) {
    error = fmt::format("cannot open --trace-out {}: {}", options.path, std::strerror(errno));
    return nullptr;
  }
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(options), file));
}

TraceWriter::TraceWriter(Options options, std::FILE* file)
    : options_(std::move(options)), start_(Clock::now()), file_(file) {
  // Unbuffered: each line is one write(2), so a failed write is the line's own, counted at once.
  std::setvbuf(file_, nullptr, _IONBF, 0);
  thread_ = std::thread([this] { run(); });
}

TraceWriter::~TraceWriter() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
  if (file_) std::fclose(file_);
}

void TraceWriter::write(const TraceRecord& record) {
  std::string line = trace_line(record);
  line += '\n';
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= options_.max_queued_lines) {
      dropped_.fetch_add(1);
      return;
    }
    queue_.push_back(std::move(line));
  }
  wake_.notify_one();
}

void TraceWriter::reopen() {
  {
    std::lock_guard lock(mutex_);
    reopen_ = true;
  }
  wake_.notify_one();
}

void TraceWriter::run() {
  std::vector<std::string> batch;
  uint64_t failures = 0;
  for (;;) {
    bool reopen = false, stop = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || reopen_ || !queue_.empty(); });
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      reopen = std::exchange(reopen_, false);
      stop = stop_;
    }
    for (const std::string& line : batch) {
      if (file_ && std::fwrite(line.data(), 1, line.size(), file_) == line.size()) {
        written_.fetch_add(1);
        continue;
      }
      dropped_.fetch_add(1);
      if (file_) std::clearerr(file_);
      if (failures++ % 1000 == 0) {
        spdlog::warn("--trace-out {}: a line could not be written ({}); {} dropped so far",
                     options_.path, std::strerror(errno), dropped_.load());
      }
    }
    batch.clear();
    if (reopen) {
      if (file_) std::fclose(file_);
      file_ = std::fopen(options_.path.c_str(), "a");
      if (file_) std::setvbuf(file_, nullptr, _IONBF, 0);
      reopens_.fetch_add(1);
      if (file_) {
        spdlog::info("--trace-out {}: reopened", options_.path);
      } else {
        spdlog::error("--trace-out {}: cannot reopen ({}); lines are dropped until the next "
                      "SIGHUP", options_.path, std::strerror(errno));
      }
    }
    if (stop) return;
  }
}

std::string TraceWriter::render_prometheus() const {
  return fmt::format(
      "# HELP brisk_trace_lines_written_total Lines written to --trace-out.\n"
      "# TYPE brisk_trace_lines_written_total counter\n"
      "brisk_trace_lines_written_total {}\n"
      "# HELP brisk_trace_lines_dropped_total Lines not written to --trace-out: its queue was "
      "full or the write failed.\n"
      "# TYPE brisk_trace_lines_dropped_total counter\n"
      "brisk_trace_lines_dropped_total {}\n"
      "# HELP brisk_trace_reopens_total Times --trace-out was reopened (SIGHUP).\n"
      "# TYPE brisk_trace_reopens_total counter\n"
      "brisk_trace_reopens_total {}\n",
      written_.load(), dropped_.load(), reopens_.load());
}

}  // namespace brisk
