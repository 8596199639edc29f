// `kapitsa pi`: the pi coding agent (npm @mariozechner/pi-coding-agent) on the local server's Chat
// Completions API. The provider is registered by a temporary pi extension (`pi -e FILE`) rather than
// in ~/.pi/agent/models.json, so the user's pi folder (settings, sessions, auth) is neither changed
// nor swapped for an empty one; startup network checks are off (PI_OFFLINE).
#include "cli/agents/agent.h"

#include <nlohmann/json.hpp>

namespace kapitsa::cli::agents {

Expected<AgentLaunch> configure_pi(const ServerInfo& server, const TempDir& temp) {
  nlohmann::json provider = {
      {"name", "Kapitsa (local)"},
      {"baseUrl", server.base_url + "/v1"},
      {"apiKey", server.api_key},
      {"api", "openai-completions"},
      {"models",
       {{{"id", server.model_id},
         {"name", server.model_id + " (kapitsa)"},
         {"reasoning", false},
         {"input", {"text"}},
         {"cost", {{"input", 0}, {"output", 0}, {"cacheRead", 0}, {"cacheWrite", 0}}},
         {"contextWindow", server.context_tokens},
         {"maxTokens", output_budget(server.context_tokens)}}}}};
  const std::string extension = "// Written by `kapitsa pi`; removed when pi exits.\nexport default function (pi) {\n  pi.registerProvider(\"kapitsa\", " +
                                provider.dump(2) + ");\n}\n";
  KAPITSA_TRY(std::string path, temp.write_file("kapitsa-provider.mjs", extension));
  AgentLaunch launch;
  launch.args = {"-e", path, "--provider", "kapitsa", "--model", server.model_id};
  launch.env.set["PI_OFFLINE"] = "1";
  launch.env.set["PI_SKIP_VERSION_CHECK"] = "1";
  return launch;
}

}  // namespace kapitsa::cli::agents
