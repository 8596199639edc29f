// HttpRequest helpers and SSE framing (see http.h).
#include "server/http.h"

#include <algorithm>
#include <cctype>

namespace kapitsa::server {
namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}
}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? std::string() : it->second;
}

void HttpRequest::set_header(std::string_view name, std::string value) { headers[lower(name)] = std::move(value); }

HttpResponse sse_response(std::function<void(StreamSink&)> writer) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = std::move(writer);
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Accel-Buffering", "no");
  return r;
}

std::string sse_frame(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(event.size() + data.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  out += "data: ";
  out += data;  // JSON from nlohmann::dump has no raw newlines
  out += "\n\n";
  return out;
}

}  // namespace kapitsa::server
