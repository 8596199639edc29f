// SlowClientGuard (see slow_client_guard.h).
#include "server/slow_client_guard.h"

#include "base/log.h"

#ifdef __linux__
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#endif

#include <cstdlib>
#include <set>

namespace kapitsa::server {

namespace {

#ifdef __linux__
// The local port of a TCP socket, or -1.
int local_port(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return -1;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return -1;
}

// "ip:port" of the connected peer, formatted as httplib formats Request::remote_addr/remote_port; empty
// for a socket that is not connected (the listening one).
std::string peer_of(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return {};
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), n, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return {};
  return std::string(host) + ":" + serv;
}
#endif

}  // namespace

SlowClientGuard::SlowClientGuard(int port, std::chrono::milliseconds timeout) : port_(port), timeout_(timeout) {
#ifdef __linux__
  thread_ = std::thread([this] { loop(); });
#endif
}

SlowClientGuard::~SlowClientGuard() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<void> SlowClientGuard::busy(const std::string& peer) {
  {
    std::lock_guard lock(mu_);
    ++busy_[peer];
  }
  return std::shared_ptr<void>(nullptr, [this, peer](void*) {
    std::lock_guard lock(mu_);
    // The connection's time to send its next request starts now (a request that came and went between
    // two scans was never seen busy).
    if (--busy_[peer] <= 0) busy_.erase(peer);
    for (auto& [fd, c] : connections_)
      if (c.peer == peer) c.idle_since = Clock::now();
  });
}

void SlowClientGuard::loop() {
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), timeout_ / 4 + std::chrono::milliseconds(1));
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    scan();
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stopping_; });
  }
}

void SlowClientGuard::scan() {
#ifdef __linux__
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  const auto now = Clock::now();
  std::set<int> seen;
  std::lock_guard lock(mu_);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const int fd = static_cast<int>(std::strtol(e->d_name, &end, 10));
    if (end == e->d_name || *end != 0 || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (local_port(fd) != port_) continue;
    const std::string peer = peer_of(fd);
    if (peer.empty()) continue;  // the listening socket
    seen.insert(fd);
    auto [it, added] = connections_.try_emplace(fd, Connection{peer, now, false});
    if (!added && it->second.peer != peer) it->second = Connection{peer, now, false};  // the fd was reused
    if (it->second.dropped) continue;  // shut down already; httplib closes it when its read returns
    if (busy_.count(peer)) {
      it->second.idle_since = now;
      continue;
    }
    if (now - it->second.idle_since <= timeout_) continue;
    // Shut down, not close: httplib still owns the descriptor and closes it when its read fails.
    it->second.dropped = true;
    if (shutdown(fd, SHUT_RDWR) == 0)
      log::warn("dropped the connection from {}: no complete request in {} ms", peer, timeout_.count());
  }
  closedir(dir);
  std::erase_if(connections_, [&](const auto& kv) { return !seen.count(kv.first); });
#endif
}

}  // namespace kapitsa::server
