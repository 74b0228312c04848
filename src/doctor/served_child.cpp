#include "doctor/served_child.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "bench/http_fetch.h"
#include "common/clock.h"
#include "common/subprocess.h"
#include "telemetry/process_finder.h"

namespace brisk::doctor {

namespace {

// A port the kernel just handed out; the child binds it moments later.
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::string log_tail(const std::string& path) {
  const auto text = telemetry::read_small_file(path).value_or("");
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

}  // namespace

ServedChild::ServedChild(const std::vector<std::string>& serve_args, double ready_timeout_s,
                         std::string& error) {
  port_ = free_loopback_port();
  argv_ = {std::filesystem::read_symlink("/proc/self/exe").string(), "serve", "--host",
           "127.0.0.1", "--port", std::to_string(port_)};
  argv_.insert(argv_.end(), serve_args.begin(), serve_args.end());
  log_path_ = (std::filesystem::temp_directory_path() /
               ("brisk-doctor-serve-" + std::to_string(getpid()) + ".log"))
                  .string();
  const int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> c_argv;
  for (const std::string& arg : argv_) c_argv.push_back(const_cast<char*>(arg.c_str()));
  c_argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    error = "cannot start brisk serve (fork failed)";
    return;
  }
  pid_ = pid;
  bench::TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = std::to_string(port_);
  const TimePoint deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(ready_timeout_s * 1000));
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error = "brisk serve exited before it was ready (" + describe_command(argv_) +
              "); its log:\n" + log_tail(log_path_);
      return;
    }
    if (bench::fetch(target, "/ready", "", std::chrono::milliseconds(1000)).ok()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop();
  error = "brisk serve was not ready within " + std::to_string(static_cast<int>(ready_timeout_s)) +
          " s (" + describe_command(argv_) + "); its log:\n" + log_tail(log_path_);
}

ServedChild::~ServedChild() { stop(); }

std::string ServedChild::command() const { return describe_command(argv_); }

void ServedChild::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {  // brisk serve drains in well under 20 s
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace brisk::doctor
