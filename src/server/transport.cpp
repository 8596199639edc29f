// HttpServer over cpp-httplib (see transport.h).
#include "server/transport.h"

#include "base/log.h"
#include "server/api/api.h"
#include "server/api/common.h"
#include "server/page.h"
#include "server/port_owner.h"
#include "server/slow_client_guard.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <thread>

namespace kapitsa::server {
namespace {

bool anthropic_path(const std::string& path) { return path.starts_with("/v1/messages"); }

HttpResponse error_for(const std::string& path, const ApiError& e) {
  return anthropic_path(path) ? api::anthropic_error(e) : api::openai_error(e);
}

std::string strip_v1(const std::string& path) { return path.starts_with("/v1/") ? path.substr(3) : path; }

// Sends each write straight to the socket (httplib writes one HTTP chunk per call).
class HttplibSink : public StreamSink {
 public:
  explicit HttplibSink(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view data) override {
    if (!ok_) return false;
    ok_ = sink_.write(data.data(), data.size());
    return ok_;
  }

 private:
  httplib::DataSink& sink_;
  bool ok_ = true;
};

}  // namespace

struct HttpServer::Impl {
  httplib::Server server;
  // httplib's stop() does nothing until listen has marked the server running, so a stop() that came
  // while run() was starting would be lost and run() would serve forever (a test's join hung under
  // load). run() and stop() tell each other where they are; see both.
  std::atomic<bool> run_started{false}, run_returned{false}, stopping{false};
  std::unique_ptr<SlowClientGuard> slow_client_guard;  // made once the port is known
};

HttpServer::HttpServer(Service& service, TransportOptions options)
    : service_(service), options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

namespace {

// Compares every byte whatever the first difference, so the time taken does not tell how much of a
// guessed key was right.
bool same_secret(const std::string& given, const std::string& secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i)
    diff |= static_cast<unsigned char>(secret[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

}  // namespace

HttpResponse HttpServer::route(const HttpRequest& req) {
  const std::string& path = req.path;
  if (req.method == "OPTIONS") {
    HttpResponse r;
    r.status = options_.cors ? 204 : 404;
    return r;
  }
  if (path == "/health" || path == "/v1/health") return api::health(service_, req);
  // The chat page needs no key (it asks for one and sends it with its API calls). Claude Code's
  // preconnect is `HEAD <base URL>` without a key (docs/agents.md): it gets the page's 200.
  if (req.method == "GET" || req.method == "HEAD")
    if (auto page = page_response(path)) return *std::move(page);

  if (!options_.api_key.empty()) {
    std::string auth = req.header("authorization");
    std::string key = req.header("x-api-key");
    if (auth.size() > 7 && std::equal(auth.begin(), auth.begin() + 7, "bearer ", [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        }))
      key = auth.substr(7);
    if (!same_secret(key, options_.api_key))
      return error_for(path, ApiError{ErrorKind::unauthenticated, "invalid or missing API key (send Authorization: "
                                                                 "Bearer KEY or x-api-key: KEY)"});
  }

  const std::string p = strip_v1(path);
  if (req.method == "GET") {
    if (path == "/metrics") return api::metrics(service_, req);
    if (p == "/models") return api::models_list(service_, req);
    if (p.starts_with("/models/")) return api::model_get(service_, p.substr(8));
  } else if (req.method == "POST") {
    if (p == "/chat/completions") return api::openai_chat(service_, req);
    if (p == "/completions") return api::openai_completions(service_, req);
    if (p == "/responses") return api::openai_responses(service_, req);
    if (path == "/v1/messages") return api::anthropic_messages(service_, req);
    if (path == "/v1/messages/count_tokens") return api::anthropic_count_tokens(service_, req);
  }
  return error_for(path, ApiError{ErrorKind::not_found, req.method + " " + path + " is not an endpoint of this server"});
}

bool HttpServer::bind(std::string& error) {
  auto& svr = impl_->server;
  const int threads = std::max(4, options_.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(options_.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  svr.set_keep_alive_timeout(10);
  svr.set_read_timeout(60, 0);
  svr.set_write_timeout(60, 0);
  svr.set_tcp_nodelay(true);
  // httplib's default also sets SO_REUSEPORT, which lets a second server (or any local process) bind
  // the same port and take a share of the connections. SO_REUSEADDR alone only allows a restart while
  // old connections linger in TIME_WAIT.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });

  auto handler = [this](const httplib::Request& hreq, httplib::Response& hres) {
    // Busy until the reply is written: the token lives in the stream's provider when there is one.
    std::shared_ptr<void> busy;
    if (impl_->slow_client_guard) busy = impl_->slow_client_guard->busy(hreq.remote_addr + ":" + std::to_string(hreq.remote_port));
    HttpRequest req;
    req.method = hreq.method;
    req.path = hreq.path;
    req.body = hreq.body;
    for (const auto& [k, v] : hreq.headers) req.set_header(k, v);
    for (const auto& [k, v] : hreq.params) req.query[k] = v;  // ?beta=true and friends: ignored by the APIs
    HttpResponse res = route(req);
    hres.status = res.status;
    for (const auto& [k, v] : res.headers) hres.set_header(k, v);
    if (options_.cors) {
      hres.set_header("Access-Control-Allow-Origin", "*");
      hres.set_header("Access-Control-Allow-Headers", "*");
      hres.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    }
    if (options_.log_requests) log::info("{} {} {}{}", req.method, req.path, res.status, res.stream ? " (stream)" : "");
    service_.metrics().count_request(req.method + " " + (res.status == 404 ? std::string("other") : req.path), res.status);
    if (res.stream) {
      auto writer = std::move(res.stream);
      hres.set_chunked_content_provider(res.content_type, [writer, busy](size_t, httplib::DataSink& sink) {
        HttplibSink s(sink);
        writer(s);
        sink.done();
        return true;
      });
    } else if (req.method != "HEAD") {
      hres.set_content(res.body, res.content_type);
    }
  };
  for (const char* pattern : {R"(/.*)"}) {
    svr.Get(pattern, handler);
    svr.Post(pattern, handler);
    svr.Options(pattern, handler);
  }
  // Errors httplib raises itself (body over the limit, bad request lines) get a JSON body too.
  svr.set_error_handler([this](const httplib::Request& hreq, httplib::Response& hres) {
    if (!hres.body.empty()) return;
    ApiError e{ErrorKind::invalid_argument, "bad request"};
    if (hres.status == 413)
      e = ApiError{ErrorKind::too_large, "request body too large (limit " + std::to_string(options_.max_body_bytes) + " bytes)"};
    else if (hres.status == 404)
      e = ApiError{ErrorKind::not_found, hreq.method + " " + hreq.path + " is not an endpoint of this server"};
    const std::string body = anthropic_path(hreq.path) ? anthropic_error_json(e) : openai_error_json(e);
    hres.set_content(body, "application/json");
  });

  if (options_.port == 0) {
    port_ = svr.bind_to_any_port(options_.host);
    if (port_ <= 0) {
      error = "cannot bind " + options_.host + " to any port";
      return false;
    }
  } else {
    if (!svr.bind_to_port(options_.host, options_.port)) {
      const std::string owner = port_owner(options_.port);
      error = owner.empty() ? "cannot bind " + options_.host + ":" + std::to_string(options_.port) +
                                  " (the port is in use, or the address is not one of this machine's)"
                            : "port " + std::to_string(options_.port) + " is in use by " + owner +
                                  " (stop it, or choose another port with --port)";
      return false;
    }
    port_ = options_.port;
  }
  if (options_.request_timeout.count() > 0)
    impl_->slow_client_guard = std::make_unique<SlowClientGuard>(port_, options_.request_timeout);
  return true;
}

void HttpServer::run() {
  impl_->run_started = true;
  if (!impl_->stopping) impl_->server.listen_after_bind();
  impl_->run_returned = true;
}

void HttpServer::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  // run() began and may not be listening yet: wait until it is (then stop it) or until it returned.
  // Seq-cst flags: of a concurrent run() and stop(), at least one sees the other's flag.
  if (impl_->run_started)
    while (!impl_->server.is_running() && !impl_->run_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (impl_->server.is_running()) impl_->server.stop();
}

}  // namespace kapitsa::server
