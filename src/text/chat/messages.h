// Conversation input for chat templates: the shape of one entry of conversations.json and of an
// OpenAI chat request (`messages`, optional `tools`, `add_generation_prompt`, template `kwargs`).
// prepare_messages turns client messages into what templates expect: tool-call `arguments` given
// as JSON strings become objects; optionally text-only content parts become one string.
// Key order is preserved everywhere (ordered_json): tojson in templates prints it.
#pragma once

#include "base/status.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kapitsa::text {

using OrderedJson = nlohmann::ordered_json;

struct ChatRequest {
  OrderedJson messages = OrderedJson::array();  // [{role, content, tool_calls?, ...}]
  OrderedJson tools;                            // array, or null when the request has none
  bool add_generation_prompt = true;
  OrderedJson kwargs = OrderedJson::object();   // extra template variables: enable_thinking, ...
};

struct ChatOptions {
  // Join content given as a list of {"type": "text"} parts into one string. Off by default, to
  // render exactly what transformers renders; templates that only handle strings need it on.
  bool flatten_text_parts = false;
};

// Reads {messages, tools?, add_generation_prompt?, kwargs?}; `where` names the source in errors.
Expected<ChatRequest> chat_request_from_json(const OrderedJson& conversation, const std::string& where);

// Validates messages (an array of objects with a string `role`) and normalises them for templates.
Expected<OrderedJson> prepare_messages(const OrderedJson& messages, const ChatOptions& options);
// The same for one message, messages[i]: the normalised copy, or nullopt when it needs no change
// (most do: a caller can then use it as it is, without copying a long conversation).
Expected<std::optional<OrderedJson>> prepare_message(const OrderedJson& m, size_t i, const ChatOptions& options);

}  // namespace kapitsa::text
