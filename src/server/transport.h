// HttpServer: the HTTP transport (cpp-httplib). Binds 127.0.0.1 by default, routes paths to the API
// endpoints, checks the optional API key (Bearer or x-api-key; /health and the chat page at / stay open), limits
// body size, streams SSE responses with a flush per event, keeps connections alive, answers CORS only
// when enabled, drops clients too slow to send a request, and stops gracefully. route() is the whole request → response mapping without
// sockets, so tests can drive it directly.
#pragma once

#include "server/http.h"
#include "server/service.h"

#include <chrono>
#include <memory>
#include <string>

namespace kapitsa::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                           // 0: any free port (see HttpServer::port())
  std::string api_key;                       // empty: no authentication
  bool cors = false;                         // Access-Control-Allow-Origin: * and preflight answers
  size_t max_body_bytes = size_t{64} << 20;  // agents send up to a few MB of history
  int threads = 128;                         // connections served at once (streams hold one each)
  // Time a connection has, from its accept or the end of its previous request, to send a whole
  // request (head and body); a slower client is dropped (SlowClientGuard). 0: no limit.
  std::chrono::milliseconds request_timeout{30'000};
  bool log_requests = true;
};

class HttpServer {
 public:
  HttpServer(Service& service, TransportOptions options);
  ~HttpServer();

  // The request → response mapping (auth, routing, endpoint), without sockets.
  HttpResponse route(const HttpRequest& request);

  // Binds the socket; false (with a message in `error`) if the address is taken or invalid.
  bool bind(std::string& error);
  int port() const { return port_; }
  // Serves until stop(); call after bind().
  void run();
  // Stops accepting and closes connections; safe from another thread.
  void stop();

 private:
  struct Impl;
  Service& service_;
  TransportOptions options_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kapitsa::server
