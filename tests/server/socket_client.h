// A plain HTTP/1.1 client over a loopback socket for the live-server tests: send bytes as they are
// (a byte at a time, half a request, then hang up), read until a marker, and the helpers to read what
// comes back (status, chunked body).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace kapitsa::server::testing {

class Socket {
 public:
  explicit Socket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Socket() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool ok() const { return ok_; }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `needle` appears in what was read, or the peer closes / times out.
  std::string read_until(const std::string& needle, std::string acc = {}) {
    char buf[4096];
    while (acc.find(needle) == std::string::npos) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      acc.append(buf, static_cast<size_t>(n));
    }
    return acc;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

inline std::string http_post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The body of a chunked HTTP response (headers stripped, chunk framing removed).
inline std::string dechunk(const std::string& response) {
  size_t pos = response.find("\r\n\r\n");
  if (pos == std::string::npos) return {};
  const std::string headers = response.substr(0, pos);
  pos += 4;
  if (headers.find("chunked") == std::string::npos) return response.substr(pos);
  std::string out;
  while (pos < response.size()) {
    size_t eol = response.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(response.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += response.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

inline int status_of(const std::string& response) {
  return response.size() > 12 ? std::atoi(response.c_str() + 9) : 0;
}

}  // namespace kapitsa::server::testing
