// `kapitsa opencode`: opencode (npm opencode-ai) on the local server through its bundled
// @ai-sdk/openai-compatible provider. The whole configuration goes in OPENCODE_CONFIG_CONTENT, which
// opencode merges over the user's and the project's config files with the highest precedence, so no
// file is written and the user's other settings (agents, keybindings, MCP servers) stay in force.
#include "cli/agents/agent.h"

#include <nlohmann/json.hpp>

namespace kapitsa::cli::agents {

Expected<AgentLaunch> configure_opencode(const ServerInfo& server, const TempDir&) {
  const std::string& id = server.model_id;
  nlohmann::json model = {{"name", id + " (kapitsa)"},
                          {"tool_call", true},
                          {"limit", {{"context", server.context_tokens}, {"output", output_budget(server.context_tokens)}}}};
  nlohmann::json config = {
      {"$schema", "https://opencode.ai/config.json"},
      {"provider",
       {{"kapitsa",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "Kapitsa (local)"},
          {"options", {{"baseURL", server.base_url + "/v1"}, {"apiKey", server.api_key}}},
          {"models", {{id, model}}}}}}},
      {"model", "kapitsa/" + id},
      // The title request goes to the same local model (opencode would otherwise pick a cloud one).
      {"small_model", "kapitsa/" + id},
      {"share", "disabled"},
      {"autoupdate", false},
  };
  AgentLaunch launch;
  launch.env.set["OPENCODE_CONFIG_CONTENT"] = config.dump();
  // No models.dev catalogue download, no update check.
  launch.env.set["OPENCODE_DISABLE_MODELS_FETCH"] = "1";
  launch.env.set["OPENCODE_DISABLE_AUTOUPDATE"] = "1";
  return launch;
}

}  // namespace kapitsa::cli::agents
