// The model server an agent launcher talks to: a `kapitsa serve` already running at host:port for the
// same model (reused, left running), or one started here as a child (`kapitsa serve ...`, its output
// in a log file, its own process group) and stopped with SIGTERM when the launcher is done.
// Not the server itself: this only probes GET /health and GET /v1/models over loopback HTTP.
#pragma once

#include "base/status.h"
#include "cli/agents/process.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kapitsa::cli::agents {

struct ServerRequest {
  std::string model;       // --model as the user gave it (empty: the demo model, or whatever runs)
  std::string model_dir;   // resolved folder of `model`
  std::string model_id;    // the id `kapitsa serve` gives that folder
  bool model_given = false;
  std::string host = "127.0.0.1";
  int port = 8080;
  bool port_given = false;
  std::string api_key;
  std::optional<int64_t> context_tokens;  // --ctx for a server started here
  std::vector<std::string> serve_args;    // more `kapitsa serve` options for a server started here
};

// What the agent is pointed at.
struct ServerInfo {
  std::string base_url;  // http://HOST:PORT, no trailing slash, no /v1
  std::string model_id;  // the first id of GET /v1/models
  int64_t context_tokens = 32768;
  std::string api_key;   // what the agent sends (a dummy when the server needs none)
  bool started_here = false;
};

class LocalServer {
 public:
  // Reuses or starts a server and waits until it is ready, printing progress on stderr. `log_dir`
  // holds the log of a started server. Returns an error when interrupted (signals.interrupted()).
  static Expected<LocalServer> start_or_reuse(const ServerRequest& request, const std::string& log_dir,
                                              const SignalForwarder& signals);
  LocalServer(LocalServer&&) = default;
  ~LocalServer() { stop(); }
  const ServerInfo& info() const { return info_; }
  // Stops a server started here (SIGTERM, then SIGKILL after a grace period); no-op for a reused one.
  void stop();

 private:
  LocalServer() = default;
  ServerInfo info_;
  std::optional<Child> child_;
  std::string log_path_;
};

}  // namespace kapitsa::cli::agents
