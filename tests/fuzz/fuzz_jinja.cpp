// libFuzzer target: a chat template (Jinja, untrusted: it ships with the model) through the lexer,
// parser and interpreter — rendered with a conversation that has every role, a tool call, a tool result
// and tools, the way the server renders a request. Renders are bounded by jinja::Limits (smaller here so
// each input stays fast); anything but text or an error with a message is a finding.
#include "base/json.h"
#include "text/jinja/template.h"

#include <cstdlib>
#include <string_view>

namespace {

const nlohmann::ordered_json& context() {
  static const auto c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": [{"type": "text", "text": "List files"}]},
      {"role": "assistant", "content": "", "reasoning_content": "use ls",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"},
      {"role": "assistant", "content": "a.txt and b.txt"},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "ls", "description": "list",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
    "add_generation_prompt": true, "enable_thinking": true,
    "bos_token": "<s>", "eos_token": "<|im_end|>"})");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = kapitsa::text::jinja::Template::parse(source, "fuzz.jinja");
  if (!parsed.ok()) {
    if (parsed.error().message.empty()) std::abort();
    return 0;
  }
  kapitsa::text::jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_output = 1u << 20;
  limits.max_string = 1u << 20;
  limits.max_range = 10'000;
  auto rendered = parsed->render(context(), limits);
  if (!rendered.ok() && rendered.error().message.empty()) std::abort();
  return 0;
}
