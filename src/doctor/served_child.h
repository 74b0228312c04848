#pragma once

#include <string>
#include <vector>

namespace brisk::doctor {

// `brisk serve` started as a child process (this binary, /proc/self/exe), for `brisk doctor`
// without --url: the doctor then probes it over HTTP like any other server and never links the
// server's code. Its output goes to a log file; it is stopped (SIGTERM, then SIGKILL) on
// destruction.
class ServedChild {
 public:
  // Starts `brisk serve --host 127.0.0.1 --port P <serve_args>` on a free port and waits until
  // /ready answers 200 (at most `ready_timeout_s`). On failure `error` holds the reason and the
  // log's tail.
  ServedChild(const std::vector<std::string>& serve_args, double ready_timeout_s, std::string& error);
  ~ServedChild();
  ServedChild(const ServedChild&) = delete;
  ServedChild& operator=(const ServedChild&) = delete;

  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& log_path() const { return log_path_; }
  std::string command() const;

 private:
  void stop();
  int pid_ = -1;
  int port_ = 0;
  std::vector<std::string> argv_;
  std::string log_path_;
};

}  // namespace brisk::doctor
