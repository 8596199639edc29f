// ChatFormat: what a chat template teaches its model to write besides plain text — the tool-call
// syntax (Qwen XML, Hermes JSON, Nemotron <TOOLCALL>) and whether replies may reason in <think>
// blocks. Read from the template's source once; every caller (server, `kapitsa chat`/`run`) parses
// replies with it, so no caller names a model's format itself.
#pragma once

#include "text/parse/output_parser.h"

#include <string_view>

namespace kapitsa::text {

struct ChatFormat {
  ToolFormat tools = ToolFormat::none;
  bool reasoning = false;  // the template knows <think>: a reply may open (or start inside) one

  bool operator==(const ChatFormat&) const = default;
};

ChatFormat chat_format_of(std::string_view template_source);

}  // namespace kapitsa::text
