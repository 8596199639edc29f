// SlowClientGuard: drops connections that take too long to send a request — a client that sends its
// headers or body one byte a second (a "slow loris") would otherwise hold one of the server's
// connection threads for as long as it likes, and a few hundred of them would starve the server.
//
// Why it looks like this: cpp-httplib 0.11 (Debian 12) has only per-read timeouts, which every byte
// resets, and no hook between accept() and the request. So the guard watches from outside: twice a
// second it lists this process's sockets connected to the server's port (/proc/self/fd), and a
// connection that has not been inside a request handler (or streaming a reply) for longer than the
// timeout is shut down, which ends httplib's read on it. The handler marks its connection busy by the
// peer address httplib reports. Linux only; elsewhere it does nothing (see docs/reliability.md).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace kapitsa::server {

class SlowClientGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // Watches connections to local `port`; each has `timeout` from its accept (or the end of its last
  // request) to deliver a whole request.
  SlowClientGuard(int port, std::chrono::milliseconds timeout);
  ~SlowClientGuard();

  // Marks the connection from `peer` ("ip:port" as httplib reports it) busy until the token is dropped.
  std::shared_ptr<void> busy(const std::string& peer);

 private:
  struct Connection {
    std::string peer;
    Clock::time_point idle_since;
    bool dropped;
  };
  void loop();
  void scan();  // one pass over the sockets

  const int port_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::map<std::string, int> busy_;       // peer → requests in progress
  std::map<int, Connection> connections_; // fd → what the last scan saw
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kapitsa::server
