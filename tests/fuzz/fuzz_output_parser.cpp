// libFuzzer target: the reply parsers (text/parse) — reasoning blocks and each tool-call format, fed
// in chunks of every size as a stream delivers them. The first input byte picks the configuration
// (reasoning on/off, starting inside reasoning, tool format, chunk size, typed tools); the rest is the model's text.
#include "text/parse/output_parser.h"

#include <string_view>

namespace {
// The request's tools (OpenAI shape), so XML calls convert arguments to their declared types.
const kapitsa::Json& tools() {
  static const kapitsa::Json t = kapitsa::Json::parse(R"([{"type": "function", "function": {"name": "edit",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
    "ratio": {"type": "number"}, "force": {"type": "boolean"}, "ops": {"type": "array"},
    "meta": {"type": "object"}}}}}])");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t config = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  kapitsa::text::ParserOptions options;
  options.reasoning = config & 1;
  options.starts_in_reasoning = config & 2;
  options.tools = static_cast<kapitsa::text::ToolFormat>((config >> 2) & 3);
  if (config & 0x80) options.tool_schemas = tools();
  kapitsa::text::OutputParser parser(options);
  const size_t step = 1 + ((config >> 4) & 7);
  for (size_t at = 0; at < text.size(); at += step) parser.feed(text.substr(at, step));
  parser.finish();
  return 0;
}
