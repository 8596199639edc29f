// The chat page `kapitsa serve` answers at GET / (src/server/page/: index.html, style.css, app.js,
// markdown.js). The build embeds the files' bytes (cmake/embed_page.cmake), so the binary needs
// neither the source tree nor the network to serve them. page_response() is the route for "/" and
// "/page/<name>"; the page talks to the server only through the public API (/v1/models,
// /v1/chat/completions), with the API key the user types in.
#pragma once

#include "server/http.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::server {

struct PageFile {
  std::string_view name;   // "index.html"
  std::string_view bytes;  // the file as built
};

// Every embedded file (defined in the generated page_files.cpp).
const std::vector<PageFile>& page_files();

// GET or HEAD of "/" (index.html) or "/page/<name>": the file with its content type and headers that
// keep it to this origin (Content-Security-Policy 'self': no inline script runs, so model output that
// slipped into the DOM still could not execute). nullopt for any other path.
std::optional<HttpResponse> page_response(const std::string& path);

}  // namespace kapitsa::server
