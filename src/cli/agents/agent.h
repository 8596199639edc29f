// The coding agents `kapitsa <agent>` can start, and how each one is pointed at a local server: the
// arguments put before the user's own and the environment it runs with, plus temporary files in a
// folder the launcher removes afterwards. Nothing here writes the user's own configuration files:
// every setting travels in environment variables, command-line overrides or temporary files.
// One file per agent (opencode.cpp, claude.cpp, codex.cpp, pi.cpp) implements `configure`.
#pragma once

#include "base/status.h"
#include "cli/agents/local_server.h"
#include "cli/agents/process.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kapitsa::cli::agents {

struct AgentLaunch {
  std::vector<std::string> args;  // before the user's arguments
  EnvChanges env;
};

using Configure = Expected<AgentLaunch> (*)(const ServerInfo& server, const TempDir& temp);

struct AgentKind {
  const char* name;          // the subcommand: kapitsa opencode
  const char* binary;        // looked up on PATH
  const char* bin_env;       // overrides the PATH lookup (tests): KAPITSA_OPENCODE_BIN
  const char* install_hint;  // shown when the binary is missing
  const char* example;       // a one-turn non-interactive run, for --help
  Configure configure;
};

// opencode, claude, codex, pi (in that order).
const std::vector<AgentKind>& agent_kinds();

Expected<AgentLaunch> configure_opencode(const ServerInfo& server, const TempDir& temp);
Expected<AgentLaunch> configure_claude(const ServerInfo& server, const TempDir& temp);
Expected<AgentLaunch> configure_codex(const ServerInfo& server, const TempDir& temp);
Expected<AgentLaunch> configure_pi(const ServerInfo& server, const TempDir& temp);

// The output budget an agent is told the model has: a quarter of the context, within [256, 8192], so
// that an agent's prompt (2k–20k tokens) plus one reply fits the window.
inline int64_t output_budget(int64_t context_tokens) {
  return std::clamp<int64_t>(context_tokens / 4, 256, 8192);
}

}  // namespace kapitsa::cli::agents
