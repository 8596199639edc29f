// `kapitsa codex`: Codex CLI (npm @openai/codex) on the local server's Responses API. Settings go in
// as `-c key=value` overrides on Codex's command line (they win over ~/.codex/config.toml and are not
// saved), so the user's Codex home, sessions and AGENTS.md stay as they are; the only file is a
// temporary model catalog. The catalog entry matters: for a model id it does not know, Codex offers
// no file-editing tool at all; an entry with apply_patch_tool_type "freeform" makes it offer
// apply_patch. The entry's base_instructions replace Codex's GPT-specific system prompt with a short
// one written for local models.
#include "cli/agents/agent.h"

#include <nlohmann/json.hpp>

namespace kapitsa::cli::agents {
namespace {

constexpr const char* kInstructions =
    "You are a coding agent running in the Codex CLI on the user's machine, answered by a local model. "
    "You and the user share a workspace: the current directory.\n\n"
    "- Run shell commands with the exec_command tool (search with `rg`, read files with `sed -n` or `cat`).\n"
    "- Change files with the apply_patch tool; never paste a patch into your reply instead of applying it.\n"
    "- Keep changes small and focused on the task, in the style of the surrounding code.\n"
    "- After changing code, build it or run its tests when you can.\n"
    "- Finish with a short reply: what you did and what the user should check. Answer questions directly; "
    "say so when you are not sure.\n";

// A TOML basic string (Codex parses each -c value as TOML).
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

nlohmann::json catalog_entry(const ServerInfo& server) {
  return {{"slug", server.model_id},
          {"display_name", server.model_id},
          {"description", "Local model served by kapitsa"},
          {"base_instructions", kInstructions},
          {"supported_reasoning_levels", nlohmann::json::array()},
          {"shell_type", "unified_exec"},
          {"visibility", "list"},
          {"supported_in_api", true},
          {"priority", 1},
          {"support_verbosity", false},
          {"apply_patch_tool_type", "freeform"},
          {"truncation_policy", {{"mode", "tokens"}, {"limit", 10000}}},
          {"experimental_supported_tools", nlohmann::json::array()},
          {"input_modalities", {"text"}},
          {"context_window", server.context_tokens},
          {"max_context_window", server.context_tokens}};
}

}  // namespace

Expected<AgentLaunch> configure_codex(const ServerInfo& server, const TempDir& temp) {
  nlohmann::json catalog = {{"models", {catalog_entry(server)}}};
  KAPITSA_TRY(std::string catalog_path, temp.write_file("codex-models.json", catalog.dump(2)));
  AgentLaunch launch;
  auto set = [&](const std::string& key, const std::string& toml_value) {
    launch.args.push_back("-c");
    launch.args.push_back(key + "=" + toml_value);
  };
  set("model_provider", toml_string("kapitsa"));
  set("model_providers.kapitsa", "{name=" + toml_string("Kapitsa (local)") + ", base_url=" +
                                     toml_string(server.base_url + "/v1") +
                                     ", wire_api=\"responses\", env_key=\"KAPITSA_CODEX_API_KEY\"}");
  set("model", toml_string(server.model_id));
  set("model_catalog_json", toml_string(catalog_path));
  set("model_context_window", std::to_string(server.context_tokens));
  // No analytics, update check, or plugin / app catalogue downloads.
  set("analytics.enabled", "false");
  set("check_for_update_on_startup", "false");
  set("features.plugins", "false");
  set("features.remote_plugin", "false");
  set("features.apps", "false");
  launch.env.set["KAPITSA_CODEX_API_KEY"] = server.api_key;
  return launch;
}

}  // namespace kapitsa::cli::agents
