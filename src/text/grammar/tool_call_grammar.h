// Grammar for a forced tool call: the model must emit exactly one well-formed call of one of `tools`
// (already filtered by the caller to the allowed ones), in the model's own format (see
// text/parse/tool_calls.h), with arguments valid against the tool's parameter schema.
//   qwen_xml:    <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n…</function>\n</tool_call>
//                VALUE is raw text for string parameters (any text without "</parameter>", "<parameter=",
//                "</function>" or "</tool_call>"; unbounded unless the schema gives maxLength, and then
//                without '<') and JSON for other types; parameters in schema order, required ones mandatory.
//   hermes_json: <tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>
//   nemotron:    <TOOLCALL>[{"name": "NAME", "arguments": {…}}]</TOOLCALL>
// JSON strings inside a call never hold the block's closing tag raw ("</tool_call>", "</TOOLCALL>":
// the output parser would cut there); length-bounded JSON strings hold no raw '<' at all.
// Tools are OpenAI ({"type":"function","function":{name, parameters}}) or Anthropic ({name, input_schema}).
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"
#include "text/parse/output_parser.h"

#include <memory>
#include <string>

namespace kapitsa::text {

// Parameters come in the order of the given JSON: an OrderedJson keeps the tools' own order (as the
// chat template showed them), a Json is alphabetical.
Expected<std::string> tool_call_gbnf(ToolFormat format, const OrderedJson& tools, const GrammarStart& start = {});
Expected<std::string> tool_call_gbnf(ToolFormat format, const Json& tools, const GrammarStart& start = {});
Expected<std::shared_ptr<const Grammar>> grammar_for_tool_call(ToolFormat format, const OrderedJson& tools,
                                                               const GrammarStart& start = {});
Expected<std::shared_ptr<const Grammar>> grammar_for_tool_call(ToolFormat format, const Json& tools,
                                                               const GrammarStart& start = {});

}  // namespace kapitsa::text
