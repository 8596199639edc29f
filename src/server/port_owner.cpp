// Finds the listening socket's inode in /proc/net/tcp and tcp6, then the process holding it.
#include "server/port_owner.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kapitsa::server {
namespace {

// The inode of a socket listening on `port` (state 0A), or "".
std::string listening_inode(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      const size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) return inode;
    }
  }
  return "";
}

}  // namespace

std::string port_owner(int port) {
  const std::string inode = listening_inode(port);
  if (inode.empty()) return "";
  const std::string target = "socket:[" + inode + "]";
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(fd.path(), link_ec).string() != target) continue;
      std::string name;
      std::getline(std::ifstream(proc.path() / "comm"), name);
      return name + " (pid " + pid + ")";
    }
  }
  return "";
}

}  // namespace kapitsa::server
