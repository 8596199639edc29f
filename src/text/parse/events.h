// What the output parsers emit while a model's text streams in: visible content, reasoning (the
// <think> part), complete tool calls, and warnings (a malformed call, returned as content instead).
// Text events are fragments: consecutive fragments of one kind belong together.
#pragma once

#include <string>
#include <vector>

namespace kapitsa::text {

struct ToolCall {
  std::string name;
  // A JSON object as text, keys in the order the model wrote them (OpenAI's "arguments" shape; keeping
  // the order keeps a re-rendered history byte-identical for the prefix cache).
  std::string arguments = "{}";
};

struct ParseEvent {
  enum class Kind { content, reasoning, tool_call, warning };
  Kind kind = Kind::content;
  std::string text;  // content / reasoning fragment, or the warning message
  ToolCall call;     // kind == tool_call

  bool operator==(const ParseEvent& o) const {
    return kind == o.kind && text == o.text && call.name == o.call.name && call.arguments == o.call.arguments;
  }
};

using ParseEvents = std::vector<ParseEvent>;

}  // namespace kapitsa::text
