// Serves the embedded chat page (see page.h).
#include "server/page.h"

namespace kapitsa::server {
namespace {

std::string content_type(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".png")) return "image/png";
  return "application/octet-stream";
}

}  // namespace

std::optional<HttpResponse> page_response(const std::string& path) {
  std::string_view name;
  if (path == "/")
    name = "index.html";
  else if (path.starts_with("/page/"))
    name = std::string_view(path).substr(6);
  else
    return std::nullopt;
  for (const PageFile& f : page_files()) {
    if (f.name != name) continue;
    HttpResponse r;
    r.content_type = content_type(name);
    r.body = std::string(f.bytes);
    // connect-src 'self': the page talks only to the server that served it.
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    r.headers.emplace_back("Cache-Control", "no-cache");  // a rebuilt server serves its own page
    return r;
  }
  return std::nullopt;
}

}  // namespace kapitsa::server
