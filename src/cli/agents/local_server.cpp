// Reusing or starting the `kapitsa serve` an agent launcher points its agent at (see local_server.h).
#include "cli/agents/local_server.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace kapitsa::cli::agents {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Probe {
  bool listening = false;
  int health = 0;         // HTTP status of GET /health
  int models_status = 0;  // HTTP status of GET /v1/models (asked only when healthy)
  std::vector<std::pair<std::string, int64_t>> models;  // id, context_length (0: not reported)
};

// Where a client connects for a bind address: the wildcard addresses mean this machine.
std::string connect_host(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "::" || host == "[::]") return "::1";
  return host;
}

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

Probe probe(const std::string& host, int port, const std::string& api_key) {
  Probe p;
  httplib::Client cli(host, port);
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(10, 0);
  auto health = cli.Get("/health");
  if (!health) return p;
  p.listening = true;
  p.health = health->status;
  if (p.health != 200) return p;
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  auto models = cli.Get("/v1/models", headers);
  if (!models) return p;
  p.models_status = models->status;
  if (models->status != 200) return p;
  const auto body = nlohmann::json::parse(models->body, nullptr, false);
  if (!body.is_object() || !body.contains("data") || !body["data"].is_array()) return p;
  for (const auto& m : body["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    int64_t ctx = 0;
    if (m.contains("context_length") && m["context_length"].is_number_integer()) ctx = m["context_length"].get<int64_t>();
    p.models.emplace_back(m["id"].get<std::string>(), ctx);
  }
  return p;
}

std::string log_tail(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += "  | " + l + "\n";
  return out;
}

// The port a `kapitsa serve --port 0` chose, from its "listening on http://HOST:PORT" line.
int listening_port(const std::string& log_path) {
  std::ifstream in(log_path);
  static const std::regex re(R"(listening on http://\[?[^\s\]]*\]?:(\d+))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) return std::stoi(m[1].str());
  }
  return 0;
}

// Fills `info` from a healthy server's model list; `want` empty takes the first id.
bool take_model(const Probe& p, const std::string& want, ServerInfo& info) {
  for (const auto& [id, ctx] : p.models) {
    if (!want.empty() && id != want) continue;
    info.model_id = id;
    if (ctx > 0) info.context_tokens = ctx;
    return true;
  }
  return false;
}

std::string ids_of(const Probe& p) {
  std::string out;
  for (const auto& [id, ctx] : p.models) out += (out.empty() ? "'" : ", '") + id + "'";
  return out.empty() ? std::string("no model") : out;
}

}  // namespace

Expected<LocalServer> LocalServer::start_or_reuse(const ServerRequest& req, const std::string& log_dir,
                                                  const SignalForwarder& signals) {
  LocalServer server;
  const std::string host = connect_host(req.host);
  server.info_.api_key = req.api_key;
  // Without --model, any model a kapitsa server already serves there will do (`kapitsa serve --model X`
  // in one terminal, `kapitsa claude` in another); with --model, only that one.
  const std::string want = req.model_given ? req.model_id : std::string();

  Probe p = probe(host, req.port, req.api_key);
  if (p.listening && p.health == 503) {
    std::fprintf(stderr, "kapitsa: a server at %s:%d is loading its model; waiting…\n", host.c_str(), req.port);
    while (p.listening && p.health == 503) {
      if (signals.interrupted()) return error("interrupted");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      p = probe(host, req.port, req.api_key);
    }
  }
  if (p.listening && p.health == 200) {
    if (p.models_status == 401)
      return error("the server at {}:{} requires an API key; pass --api-key (or set KAPITSA_API_KEY)", host, req.port);
    if (take_model(p, want, server.info_)) {
      server.info_.base_url = "http://" + url_host(host) + ":" + std::to_string(req.port);
      std::fprintf(stderr, "kapitsa: using the server already running at %s (model '%s')\n",
                   server.info_.base_url.c_str(), server.info_.model_id.c_str());
      if (req.context_tokens)
        std::fprintf(stderr, "kapitsa: --ctx applies to a server started here; this one has a %lld-token context\n",
                     static_cast<long long>(server.info_.context_tokens));
      return server;
    }
    if (req.port_given)
      return error("the server at {}:{} serves {}, not '{}'; stop it or choose another --port", host, req.port, ids_of(p),
                   req.model_id);
    std::fprintf(stderr, "kapitsa: the server at %s:%d serves %s, not '%s'; starting another one\n", host.c_str(), req.port,
                 ids_of(p).c_str(), req.model_id.c_str());
  } else if (p.listening && req.port_given) {
    return error("something at {}:{} answers GET /health with HTTP {}: not a kapitsa server; choose another --port", host,
                 req.port, p.health);
  }

  // Start our own. Without --port it takes a free port, so that it never collides with (or is
  // reused by) another launcher's server that would stop it on exit.
  KAPITSA_TRY(std::string exe, self_executable());
  std::vector<std::string> argv = {exe, "serve", "--host", req.host, "--port", std::to_string(req.port_given ? req.port : 0)};
  if (!req.model.empty()) argv.insert(argv.end(), {"--model", req.model_dir});
  if (req.context_tokens) argv.insert(argv.end(), {"--ctx", std::to_string(*req.context_tokens)});
  if (!req.api_key.empty()) argv.insert(argv.end(), {"--api-key", req.api_key});
  argv.insert(argv.end(), req.serve_args.begin(), req.serve_args.end());
  server.log_path_ = log_dir + "/serve.log";
  SpawnOptions so;
  so.stdout_stderr_file = server.log_path_;
  so.new_process_group = true;
  so.die_with_parent = true;
  KAPITSA_TRY(Child child, Child::spawn(argv, so));
  server.child_.emplace(std::move(child));
  server.info_.started_here = true;

  const auto start = Clock::now();
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::fprintf(stderr, "kapitsa: starting kapitsa serve --model %s; loading model…", req.model_dir.c_str());
  if (!tty) std::fprintf(stderr, "\n");
  std::fflush(stderr);
  int port = req.port_given ? req.port : 0;
  auto fail = [&](const std::string& why) -> Error {
    if (tty) std::fprintf(stderr, "\n");
    server.stop();
    return error("{}\n  (kapitsa serve log {}:)\n{}", why, server.log_path_, log_tail(server.log_path_, 20));
  };
  int last_shown = -1;
  while (true) {
    if (signals.interrupted()) return fail("interrupted while the model was loading");
    if (auto code = server.child_->poll()) return fail(fmt::format("kapitsa serve exited with code {} before it was ready", *code));
    if (port == 0) port = listening_port(server.log_path_);
    if (port != 0) {
      p = probe(host, port, req.api_key);
      if (p.health == 200) break;
    }
    const int secs = static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count());
    if (tty && secs != last_shown) {
      std::fprintf(stderr, "\rkapitsa: starting kapitsa serve --model %s; loading model… %d s", req.model_dir.c_str(), secs);
      std::fflush(stderr);
      last_shown = secs;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty) std::fprintf(stderr, "\n");
  if (!take_model(p, "", server.info_)) return fail("the server answers GET /v1/models with no model");
  server.info_.base_url = "http://" + url_host(host) + ":" + std::to_string(port);
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "kapitsa: model '%s' ready at %s after %.1f s (log: %s)\n", server.info_.model_id.c_str(),
               server.info_.base_url.c_str(), secs, server.log_path_.c_str());
  return server;
}

void LocalServer::stop() {
  if (child_) {
    child_->stop(std::chrono::milliseconds(10000));
    child_.reset();
  }
}

}  // namespace kapitsa::cli::agents
