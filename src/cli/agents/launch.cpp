// `kapitsa opencode|claude|codex|pi [--model M] [--port P] [--host H] [--api-key K] [--ctx N] [-- agent args]`:
// find the agent, reuse or start a local server for the model, run the agent wired to it with the
// terminal, signals and exit code passed through, then stop the server it started and remove the
// temporary files. Exit codes: the agent's own; 127 when the agent is not installed; 1 when the
// server could not be started; 130 when interrupted while the model loads.
#include "cli/agents/agent.h"
#include "cli/commands.h"
#include "cli/generate_common.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

namespace kapitsa::cli::agents {
namespace {

struct LaunchOptions {
  std::string model;
  bool pull = false;  // --pull: download an alias / Hub id that is not cached
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int64_t context_tokens = 0;
};

std::string agent_binary(const AgentKind& kind) {
  if (const char* over = std::getenv(kind.bin_env); over != nullptr && *over != '\0') return find_executable(over);
  return find_executable(kind.binary);
}

int run_agent(const AgentKind& kind, const LaunchOptions& o, bool port_given, std::vector<std::string> user_args) {
  const std::string bin = agent_binary(kind);
  if (bin.empty()) {
    const char* over = std::getenv(kind.bin_env);
    if (over != nullptr && *over != '\0')
      std::fprintf(stderr, "kapitsa %s: %s=%s is not an executable file\n", kind.name, kind.bin_env, over);
    else
      std::fprintf(stderr, "kapitsa %s: `%s` was not found on PATH. Install it with\n    %s\nthen run this again.\n",
                   kind.name, kind.binary, kind.install_hint);
    return 127;
  }

  ServerRequest req;
  req.model = o.model;
  req.model_given = !o.model.empty();
  req.host = o.host;
  req.port = o.port;
  req.port_given = port_given;
  req.api_key = !o.api_key.empty() ? o.api_key : (std::getenv("KAPITSA_API_KEY") ? std::getenv("KAPITSA_API_KEY") : "");
  if (o.context_tokens > 0) req.context_tokens = o.context_tokens;
  auto dir = resolve_model_dir(o.model, o.pull);
  if (!dir.ok() && req.model_given) {
    std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, dir.error().message.c_str());
    return 1;
  }
  if (dir.ok()) {
    req.model_dir = *dir;
    req.model_id = served_model_id(*dir);
    if (req.model_given) req.model = *dir;
  } else {
    req.model_dir = "(the demo model)";  // only an already running server can serve then
  }

  auto temp = TempDir::create(std::string("kapitsa-") + kind.name);
  if (!temp.ok()) {
    std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, temp.error().message.c_str());
    return 1;
  }
  SignalForwarder signals;
  auto server = LocalServer::start_or_reuse(req, temp->path(), signals);
  if (!server.ok()) {
    std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, server.error().message.c_str());
    if (signals.interrupted() != 0) return 130;
    if (!dir.ok()) std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, dir.error().message.c_str());
    return 1;
  }
  ServerInfo info = server->info();
  if (info.api_key.empty()) info.api_key = "kapitsa";  // agents insist on some key; the server ignores it
  auto launch = kind.configure(info, *temp);
  if (!launch.ok()) {
    std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, launch.error().message.c_str());
    return 1;
  }
  std::vector<std::string> argv = {bin};
  argv.insert(argv.end(), launch->args.begin(), launch->args.end());
  argv.insert(argv.end(), user_args.begin(), user_args.end());
  SpawnOptions so;
  so.env = launch->env;
  auto child = Child::spawn(argv, so);
  if (!child.ok()) {
    std::fprintf(stderr, "kapitsa %s: %s\n", kind.name, child.error().message.c_str());
    return 127;
  }
  signals.set_target(child->pid());
  const int code = child->wait();
  signals.set_target(0);
  if (info.started_here) std::fprintf(stderr, "kapitsa: stopping the server it started\n");
  server->stop();
  return code;
}

}  // namespace

const std::vector<AgentKind>& agent_kinds() {
  static const std::vector<AgentKind> kinds = {
      {"opencode", "opencode", "KAPITSA_OPENCODE_BIN", "npm install -g opencode-ai", "kapitsa opencode -- run \"explain main.py\"",
       configure_opencode},
      {"claude", "claude", "KAPITSA_CLAUDE_BIN", "npm install -g @anthropic-ai/claude-code", "kapitsa claude -- -p \"explain main.py\"",
       configure_claude},
      {"codex", "codex", "KAPITSA_CODEX_BIN", "npm install -g @openai/codex", "kapitsa codex -- exec \"explain main.py\"",
       configure_codex},
      {"pi", "pi", "KAPITSA_PI_BIN", "npm install -g @mariozechner/pi-coding-agent", "kapitsa pi -- -p \"explain main.py\"",
       configure_pi},
  };
  return kinds;
}

}  // namespace kapitsa::cli::agents

namespace kapitsa::cli {

void add_agent_commands(CLI::App& app) {
  for (const agents::AgentKind& kind : agents::agent_kinds()) {
    auto o = std::make_shared<agents::LaunchOptions>();
    auto args = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = app.add_subcommand(kind.name, std::string("Start ") + kind.binary +
                                                      " wired to a local kapitsa server (started here, or one already running)");
    cmd->add_option("--model", o->model, "Model folder, .gguf, catalog alias or org/name[:quant] (default: the model of a server already running at --host:--port, else the demo model)");
    cmd->add_flag("--pull", o->pull, "Download --model first when it is an alias or Hub id not in the cache");
    CLI::Option* port = cmd->add_option("--port", o->port, "Port of the server to reuse; a server started here takes a free port unless given")
                            ->check(CLI::Range(1, 65535));
    cmd->add_option("--host", o->host, "Address of the server (default 127.0.0.1)");
    cmd->add_option("--api-key", o->api_key, "API key of the server (default $KAPITSA_API_KEY; none)");
    cmd->add_option("--ctx", o->context_tokens, "Context window of a server started here, in tokens")
        ->check(CLI::Range(int64_t{256}, int64_t{1} << 22));
    cmd->add_option("args", *args, "Arguments for the agent, after --");
    cmd->footer(std::string("Example: ") + kind.example + "\nInstall the agent: " + kind.install_hint);
    const agents::AgentKind* k = &kind;
    cmd->callback([o, args, port, k] { exit_code() = agents::run_agent(*k, *o, port->count() > 0, *args); });
  }
}

}  // namespace kapitsa::cli
