#include "common/subprocess.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace brisk {

std::string describe_command(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    if (!text.empty()) text += ' ';
    text += arg.find(' ') == std::string::npos ? arg : "'" + arg + "'";
  }
  return text;
}

int run_process(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd) {
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (const std::string& arg : argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
  c_argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    if (stdout_fd >= 0 && dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(127);
    if (stderr_fd >= 0 && dup2(stderr_fd, STDERR_FILENO) < 0) _exit(127);
    execvp(c_argv[0], c_argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

}  // namespace brisk
