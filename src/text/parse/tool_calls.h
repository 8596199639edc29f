// Parsers for the body of one tool-call block (the text between its tags), all-or-nothing: a body
// either yields calls or an Error saying what is wrong, and the caller then shows it as text.
//   Qwen XML   <function=NAME><parameter=ARG>value</parameter>…</function> (Qwen3-Coder, Qwen3.5/3.6,
//              Nemotron 3): values are text, converted to the JSON type the tool's schema declares.
//   Hermes     {"name": …, "arguments": {…}} inside <tool_call> (Qwen3, Qwen2.5).
//   Nemotron   [{"name": …, "arguments": {…}}, …] inside <TOOLCALL> (Nemotron Nano v2).
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "text/parse/events.h"

#include <string_view>
#include <vector>

namespace kapitsa::text {

// Keeps object keys in the order written (model-written arguments must round-trip unchanged).
using OrderedJson = nlohmann::ordered_json;

// `tools` is the request's tools array, OpenAI ({"type":"function","function":{name, parameters}}) or
// Anthropic ({name, input_schema}) form; may be null.
Expected<std::vector<ToolCall>> parse_qwen_xml_call(std::string_view body, const Json& tools);
Expected<std::vector<ToolCall>> parse_hermes_call(std::string_view body);
Expected<std::vector<ToolCall>> parse_nemotron_calls(std::string_view body);

// The JSON value of one XML parameter given the schema of that parameter (null schema: a string).
OrderedJson convert_parameter(std::string_view value, const Json& schema);

// The schema of parameter `arg` of tool `name` in `tools`, or null.
Json parameter_schema(const Json& tools, std::string_view name, std::string_view arg);

// JSON's whitespace (RFC 8259): space, tab, line feed, carriage return.
inline bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace kapitsa::text
