// ChatFormat (see chat_format.h).
#include "text/chat/chat_format.h"

namespace kapitsa::text {

ChatFormat chat_format_of(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  ChatFormat f;
  // Order matters: Qwen3.5 / Qwen3-Coder / Nemotron 3 wrap <function=…> in <tool_call>.
  if (has("<function=")) f.tools = ToolFormat::qwen_xml;
  else if (has("<TOOLCALL>")) f.tools = ToolFormat::nemotron;
  else if (has("<tool_call>")) f.tools = ToolFormat::hermes_json;
  f.reasoning = has("<think>");
  return f;
}

}  // namespace kapitsa::text
