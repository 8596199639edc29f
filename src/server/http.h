// The server's own view of an HTTP exchange, independent of the transport library: endpoints take an
// HttpRequest and return an HttpResponse, which is either a whole body or a stream writer (SSE).
// Tests drive endpoints through these types without sockets; transport.cpp maps them to cpp-httplib.
// Header names are stored lower-case; lookups are case-insensitive.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kapitsa::server {

struct HttpRequest {
  std::string method = "POST";
  std::string path;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case name → value
  std::map<std::string, std::string> query;

  // The header's value, or "" when absent.
  std::string header(std::string_view name) const;
  void set_header(std::string_view name, std::string value);
};

// Receives the bytes of a streamed response. write() returns false once the client is gone; the
// writer must then stop (and cancel its generation).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual bool write(std::string_view data) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Set for streamed responses: called once, on a transport thread, after the status line and
  // headers went out. It must write a complete stream (every path ends the API's event sequence).
  std::function<void(StreamSink&)> stream;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A streamed response with the SSE content type and no-cache headers.
HttpResponse sse_response(std::function<void(StreamSink&)> writer);

// One SSE frame: "event: NAME\ndata: JSON\n\n" (event line left out when `event` is empty).
std::string sse_frame(std::string_view event, std::string_view data);

}  // namespace kapitsa::server
