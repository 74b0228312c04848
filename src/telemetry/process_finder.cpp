#include "telemetry/process_finder.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace brisk::telemetry {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kListenState = "0A";  // TCP_LISTEN in the kernel's hex

// "0100007F:1F90" (or a 32-digit IPv6 address) → 8080.
std::optional<int> port_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  try {
    return std::stoi(address.substr(colon + 1), nullptr, 16);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::set<uint64_t> listening_inodes(std::string_view proc_net_tcp_text, int port) {
  std::set<uint64_t> inodes;
  std::istringstream lines{std::string(proc_net_tcp_text)};
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    uint64_t inode = 0;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode)) {
      continue;
    }
    if (state == kListenState && port_of(local) == port && inode != 0) inodes.insert(inode);
  }
  return inodes;
}

std::optional<int> process_holding_socket(const fs::path& proc_root,
                                          const std::set<uint64_t>& inodes) {
  if (inodes.empty()) return std::nullopt;
  std::set<std::string> targets;
  for (uint64_t inode : inodes) targets.insert("socket:[" + std::to_string(inode) + "]");
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(proc_root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_error;  // processes vanish and deny access: skip them, keep looking
    for (const auto& fd : fs::directory_iterator(entry.path() / "fd", fd_error)) {
      std::error_code link_error;
      const fs::path target = fs::read_symlink(fd.path(), link_error);
      if (!link_error && targets.count(target.string())) return std::stoi(name);
    }
  }
  return std::nullopt;
}

std::optional<int> find_listening_process(const fs::path& proc_root, int port) {
  std::set<uint64_t> inodes;
  for (const char* table : {"net/tcp", "net/tcp6"}) {
    if (const auto text = read_small_file(proc_root / table)) {
      inodes.merge(listening_inodes(*text, port));
    }
  }
  return process_holding_socket(proc_root, inodes);
}

std::optional<ProcessCpu> parse_process_stat(std::string_view text) {
  // "1234 (brisk serve) S 1 ...": the name may hold spaces and ')' itself, so split at the last.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  std::istringstream fields{std::string(text.substr(close + 1))};
  std::vector<std::string> rest;
  for (std::string field; fields >> field;) rest.push_back(field);
  // rest[0] is field 3 (state); utime is field 14, stime 15, num_threads 20.
  if (rest.size() < 18) return std::nullopt;
  try {
    ProcessCpu cpu;
    cpu.user_ticks = std::stoull(rest[11]);
    cpu.system_ticks = std::stoull(rest[12]);
    cpu.threads = std::stoi(rest[17]);
    cpu.command = std::string(text.substr(open + 1, close - open - 1));
    return cpu;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> read_small_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace brisk::telemetry
