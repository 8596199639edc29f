// Conversation normalisation: every API translates its request into OpenAI-chat-shaped messages and
// tools, and these functions then make them acceptable to the model's own chat template, the way
// real agents send them (../shared/notes/agents/): developer → system, leading system messages
// merged, a system message in the middle folded into the user turn, content parts joined into text,
// reasoning aliases unified, volatile per-request header lines (x-anthropic-billing-header) removed
// so the prefix cache holds. Tools that are not plain functions are kept when the model can call them
// (namespace members, custom freeform tools, tool_search) and dropped otherwise (hosted web_search).
// Deterministic: the same input always gives byte-identical output (the prefix cache depends on it).
#pragma once

#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <variant>

namespace kapitsa::server {

using OJson = nlohmann::ordered_json;

template <typename T>
using ApiResult = std::variant<T, ApiError>;

// Schema exposed to the model for a custom (freeform) tool: one string argument holding the raw text.
inline constexpr const char* kCustomToolArgument = "input";

struct NormalizedTools {
  OJson tools = nullptr;                 // [{"type":"function","function":{name, description?, parameters}}] or null
  std::set<std::string> custom_names;    // tools whose calls go back as custom_tool_call (raw text input)
};

// Accepts OpenAI chat tools ({"type":"function","function":{…}}), Responses tools (flat
// {"type":"function", name, parameters}), Anthropic tools ({name, input_schema}), "namespace" (its
// nested tools are flattened), "custom" (→ a one-string-argument function), "tool_search" (client
// side, has parameters). Hosted tools without a schema (web_search, Anthropic server tools) are dropped.
// `where` names the field in errors.
ApiResult<NormalizedTools> normalize_tools(const OJson& tools, const std::string& where);

// Messages: [{role, content, tool_calls?, tool_call_id?, reasoning_content?}] in OpenAI chat shape.
// Errors name messages[i] for a message that is not an object or has an unknown role. Takes the
// messages by value: texts are moved, not copied (an agent's conversation is 100s of KB).
ApiResult<OJson> normalize_messages(OJson messages);

// The text of a content value: a string, null (""), or a parts array whose text-like parts
// (text, input_text, output_text, refusal) are concatenated; images and unknown parts are skipped.
std::string content_text(const OJson& content);
// An error naming the first content part (of an array of parts at `where`) the model cannot read:
// images, audio, video, files — the models served take text only.
std::optional<ApiError> check_text_parts(const OJson& parts, const std::string& where);

// The prefix-cache group of a request (GenerateRequest::cache_key): the client's session key (may be
// empty) and a fingerprint of how the conversation starts — its first two normalised messages — so
// that one session's side requests (opencode's title request, Claude Code's small calls: other
// system prompts) form groups of their own and cannot age the main conversation's snapshots out.
std::string conversation_key(const std::string& session, const OJson& messages);

// Removes lines that change on every request and would defeat the prefix cache
// (Claude Code's "x-anthropic-billing-header: …; cch=<nonce>;").
std::string strip_volatile_lines(std::string text);

}  // namespace kapitsa::server
