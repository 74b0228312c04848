#include "bench/server_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "bench/http_fetch.h"
#include "common/clock.h"
#include "common/subprocess.h"

namespace brisk::bench {

namespace {

// The process groups of running servers, for the signal handler (which may only read atomics).
constexpr size_t kMaxTrackedServers = 64;
std::array<std::atomic<int>, kMaxTrackedServers> tracked_groups{};

void track(int group) {
  for (auto& slot : tracked_groups) {
    int empty = 0;
    if (slot.compare_exchange_strong(empty, group)) return;
  }
}

void untrack(int group) {
  for (auto& slot : tracked_groups) {
    int expected = group;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void kill_tracked_and_exit(int signal_number) {
  for (auto& slot : tracked_groups) {
    const int group = slot.load();
    if (group > 0) kill(-group, SIGKILL);
  }
  _exit(128 + signal_number);
}

bool exited(int pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

}  // namespace

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

ServerLaunch brisk_serve_launch(const std::vector<std::string>& serve_args,
                                const std::string& role) {
  ServerLaunch launch;
  launch.port = free_loopback_port();
  launch.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "serve", "--host",
                 "127.0.0.1", "--port", std::to_string(launch.port)};
  launch.argv.insert(launch.argv.end(), serve_args.begin(), serve_args.end());
  launch.ready_paths = {"/ready"};
  launch.log_path = (std::filesystem::temp_directory_path() /
                     ("brisk-" + role + "-" + std::to_string(getpid()) + ".log"))
                        .string();
  return launch;
}

void stop_servers_on_signals() {
  struct sigaction action {};
  action.sa_handler = kill_tracked_and_exit;
  sigemptyset(&action.sa_mask);
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(signal_number, &action, nullptr);
  }
}

ServerProcess::ServerProcess(ServerLaunch launch, std::string& error) : launch_(std::move(launch)) {
  if (launch_.argv.empty()) {
    error = "no server command to start";
    return;
  }
  const int log_fd = open(launch_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> c_argv;
  for (const std::string& arg : launch_.argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
  c_argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execvp(c_argv[0], c_argv.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    error = "cannot start the server (fork failed): " + command();
    return;
  }
  setpgid(pid, pid);  // also here: either side may run first
  pid_ = pid;
  track(pid_);
  TargetEndpoint target;
  target.host = "127.0.0.1";
  target.port = std::to_string(launch_.port);
  const TimePoint deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(launch_.ready_timeout_s * 1000));
  while (Clock::now() < deadline) {
    if (exited(pid_)) {
      untrack(pid_);
      pid_ = -1;
      error = "the server exited before it was ready (" + command() + "); its log:\n" + log_tail();
      return;
    }
    for (const std::string& path : launch_.ready_paths) {
      if (fetch(target, path, "", std::chrono::milliseconds(1000)).ok()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop(1);
  error = "the server was not ready within " +
          std::to_string(static_cast<int>(launch_.ready_timeout_s)) + " s (" + command() +
          "); its log:\n" + log_tail();
}

ServerProcess::~ServerProcess() { stop(); }

std::string ServerProcess::command() const { return describe_command(launch_.argv); }

std::string ServerProcess::log_tail(size_t max_bytes) const {
  std::ifstream in(launch_.log_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
}

void ServerProcess::stop(double stop_grace_s) {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  const TimePoint deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(stop_grace_s * 1000));
  bool gone = false;
  while (!(gone = exited(pid_)) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid_, SIGKILL);  // whatever it started and left behind, too
  if (!gone) waitpid(pid_, nullptr, 0);
  untrack(pid_);
  pid_ = -1;
}

}  // namespace brisk::bench
