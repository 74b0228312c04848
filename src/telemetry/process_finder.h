#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace brisk::telemetry {

// Finds the process that listens on a local TCP port the way `ss -ltnp` does: the socket's inode
// from /proc/net/tcp (and tcp6), then the process holding an fd that links to "socket:[inode]".
// Only processes this user may inspect are found (all of them for root).

// Inodes of sockets in LISTEN state on `port` in one /proc/net/tcp or tcp6 text.
std::set<uint64_t> listening_inodes(std::string_view proc_net_tcp_text, int port);

// The first process under `proc_root` (normally /proc) with an fd on one of `inodes`.
std::optional<int> process_holding_socket(const std::filesystem::path& proc_root,
                                          const std::set<uint64_t>& inodes);

// Both steps on the real (or a recorded) /proc: nullopt when no visible process listens there.
std::optional<int> find_listening_process(const std::filesystem::path& proc_root, int port);

// CPU a process has used, from /proc/PID/stat.
struct ProcessCpu {
  uint64_t user_ticks = 0;
  uint64_t system_ticks = 0;
  int threads = 0;
  std::string command;  // the name in parentheses
  uint64_t total_ticks() const { return user_ticks + system_ticks; }
};

std::optional<ProcessCpu> parse_process_stat(std::string_view text);

// The whole text of a small file (a /proc entry), or nullopt when it cannot be read.
std::optional<std::string> read_small_file(const std::filesystem::path& path);

}  // namespace brisk::telemetry
