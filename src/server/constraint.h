// OutputConstraint: what a request restricts the model's output to, read from each API's own fields —
// OpenAI chat `response_format` and `tool_choice`, Responses `text.format` and `tool_choice`,
// Anthropic `tool_choice` and `output_config.format` / `output_format`. Parsing only: the Service turns
// a constraint into a grammar for the model's own formats (service.cpp), the runtime enforces it.
// A forced tool call wins over a response format (the reply then is the call, not a document).
#pragma once

#include "server/conversation.h"
#include "text/grammar/grammar.h"
#include "text/parse/output_parser.h"

#include <memory>

#include <optional>
#include <string>

namespace kapitsa::server {

struct OutputConstraint {
  enum class Kind {
    none,         // free text (tool calls allowed when tools are offered)
    json_object,  // any JSON object
    json_schema,  // a JSON document valid against `schema`
    tool_call,    // exactly one call of `tool_name`, or of any offered tool when it is empty
  };
  Kind kind = Kind::none;
  OJson schema = nullptr;
  std::string tool_name;
};

// OpenAI Chat Completions: tool_choice ("none" | "auto" | "required" | {"type":"function",
// "function":{"name"}}) and response_format ({"type":"text"|"json_object"|"json_schema",
// "json_schema":{"name","schema","strict"}}).
ApiResult<OutputConstraint> openai_chat_constraint(const OJson& body);

// OpenAI Responses: tool_choice ("none" | "auto" | "required" | {"type":"function"|"custom","name"} |
// {"type":"allowed_tools","mode":"required"|"auto",...}) and text.format ({"type":"text"|
// "json_object"|"json_schema","name","schema","strict"}).
ApiResult<OutputConstraint> responses_constraint(const OJson& body);

// Anthropic Messages: tool_choice ({"type":"auto"|"any"|"tool"|"none","name"}) and structured output
// (output_config.format or output_format: {"type":"json_schema","schema"}).
ApiResult<OutputConstraint> anthropic_constraint(const OJson& body);

// The grammar enforcing `c` (null for Kind::none). `tools`: the offered tools, normalised
// ([{"type":"function","function":{name, parameters}}] or null); `format`: how this model writes tool
// calls; `start`: whether its output may begin with reasoning. Errors name the request field to blame
// (a forced call with no tools, a named tool that is not offered, a schema the converter rejects).
ApiResult<std::shared_ptr<const text::Grammar>> constraint_grammar(const OutputConstraint& c, const OJson& tools,
                                                                   text::ToolFormat format,
                                                                   const text::GrammarStart& start);

}  // namespace kapitsa::server
