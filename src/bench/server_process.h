#pragma once

#include <string>
#include <vector>

namespace brisk::bench {

// How to start a server for the length of a measurement and know it is ready.
struct ServerLaunch {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up on PATH; no shell
  int port = 0;                   // where it listens, on 127.0.0.1
  // Ready once GET of one of these answers 200 (brisk serve: /ready; llama-server, vLLM, TGI:
  // /health; any OpenAI server: /v1/models).
  std::vector<std::string> ready_paths = {"/health", "/v1/models"};
  double ready_timeout_s = 120;
  std::string log_path;  // its stdout and stderr
};

// A server started as a child process (brisk doctor without --url, brisk tune's candidates),
// in a process group of its own, and stopped on destruction: SIGTERM to the group, SIGKILL after
// `stop_grace_s`. It also dies with us: the kernel kills it when this process ends, however that
// happens (PR_SET_PDEATHSIG), and stop_servers_on_signals() covers Ctrl-C.
class ServerProcess {
 public:
  // Starts it and waits until it is ready; on failure `error` holds the reason and the log's
  // tail, and nothing is left running.
  ServerProcess(ServerLaunch launch, std::string& error);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }
  int port() const { return launch_.port; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(launch_.port); }
  const std::string& log_path() const { return launch_.log_path; }
  std::string command() const;  // as a user could paste it into a shell
  // The last `max_bytes` of its log.
  std::string log_tail(size_t max_bytes = 2000) const;
  void stop(double stop_grace_s = 20);

 private:
  ServerLaunch launch_;
  int pid_ = -1;
};

// `brisk serve --host 127.0.0.1 --port P <serve_args>` of this very binary on a free port P,
// ready when /ready answers, logging to a file in the temporary directory named after `role`.
ServerLaunch brisk_serve_launch(const std::vector<std::string>& serve_args,
                                const std::string& role);

// A port the kernel just handed out on 127.0.0.1; a child binds it moments later.
int free_loopback_port();

// From now on SIGINT, SIGTERM and SIGHUP kill every running ServerProcess (SIGKILL to its
// group) and end this process with 128 + the signal, as the default action would: a user's
// Ctrl-C leaves no server behind.
void stop_servers_on_signals();

}  // namespace brisk::bench
