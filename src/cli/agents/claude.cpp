// `kapitsa claude`: Claude Code (npm @anthropic-ai/claude-code) on the local server's Anthropic
// Messages API, configured by environment variables only (Claude Code reads no file for this). Every
// model role (main, opus/sonnet/haiku aliases, background and subagent model) maps to the one local
// model, and nonessential traffic (telemetry, error reports, update checks) is off.
#include "cli/agents/agent.h"

namespace kapitsa::cli::agents {

Expected<AgentLaunch> configure_claude(const ServerInfo& server, const TempDir&) {
  AgentLaunch launch;
  auto& env = launch.env.set;
  env["ANTHROPIC_BASE_URL"] = server.base_url;  // the bare origin: the client appends /v1/messages
  env["ANTHROPIC_AUTH_TOKEN"] = server.api_key;  // sent as Authorization: Bearer
  // A real Anthropic key in the user's environment must not be sent to (or preferred over) the local
  // server, and Claude Code warns when both are set.
  launch.env.unset.push_back("ANTHROPIC_API_KEY");
  for (const char* var : {"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                          "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"})
    env[var] = server.model_id;
  env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1";
  env["DISABLE_TELEMETRY"] = "1";
  // The billing header block would otherwise change per request in some versions and defeat the
  // server's prefix cache.
  env["CLAUDE_CODE_ATTRIBUTION_HEADER"] = "0";
  // Claude asks for max_tokens 32000 by default; a budget that fits beside its ~20k-token prompt.
  env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = std::to_string(output_budget(server.context_tokens));
  return launch;
}

}  // namespace kapitsa::cli::agents
