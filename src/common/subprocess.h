#pragma once

#include <string>
#include <vector>

namespace brisk {

// The command as a user could paste it into a shell (for error messages).
std::string describe_command(const std::vector<std::string>& argv);

// Runs argv[0] from PATH with the arguments passed as-is (no shell, so no quoting or injection
// issues) and returns its exit status: 128+N for death by signal N, 127 when it could not start.
// stdout goes to `stdout_fd` when one is given; stderr stays with ours so the user sees the tool's
// own explanation of what went wrong, unless `stderr_fd` is given (a chatty tool's log file).
int run_process(const std::vector<std::string>& argv, int stdout_fd = -1, int stderr_fd = -1);

}  // namespace brisk
