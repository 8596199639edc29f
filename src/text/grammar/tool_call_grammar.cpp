// Forced tool-call grammars in each model's own format (see tool_call_grammar.h).
#include "text/grammar/tool_call_grammar.h"

#include "text/grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace kapitsa::text {
namespace {

struct Tool {
  std::string name;
  OrderedJson parameters;  // the JSON schema of the arguments (an object schema)
};

Expected<std::vector<Tool>> read_tools(const OrderedJson& tools) {
  if (!tools.is_array() || tools.empty()) return error("tool-call grammar: 'tools' must be a non-empty array");
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OrderedJson& t = tools[i];
    if (!t.is_object()) return error("tool-call grammar: tools[{}] is not an object", i);
    const OrderedJson& f = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      return error("tool-call grammar: tools[{}] has no name", i);
    Tool tool;
    tool.name = f["name"].get<std::string>();
    const char* key = f.contains("parameters") ? "parameters" : "input_schema";
    tool.parameters = f.contains(key) && f[key].is_object() ? f[key] : OrderedJson{{"type", "object"}};
    if (tool.parameters.empty() || !tool.parameters.contains("type")) tool.parameters["type"] = "object";
    out.push_back(std::move(tool));
  }
  return out;
}

// The type the XML parser converts a parameter's text to (as convert_parameter decides): "" or
// "string" means the value is written as raw text.
std::string xml_value_type(const OrderedJson& schema) {
  if (!schema.is_object()) return {};
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  if (schema.contains("type")) {
    const OrderedJson& t = schema["type"];
    if (t.is_string()) return lower(t.get<std::string>());
    if (t.is_array()) {
      for (const OrderedJson& e : t)
        if (e.is_string() && e.get<std::string>() != "null") return lower(e.get<std::string>());
      return {};
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    for (const OrderedJson& alt : schema[key]) {
      const std::string t = xml_value_type(alt);
      if (!t.empty()) return t;
    }
    return {};
  }
  if (schema.contains("enum")) return "string";
  return {};
}

std::string tool_rule_name(const std::string& name, size_t i) {
  std::string out = fmt::format("tool{}-", i);
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return out;
}

// Qwen XML: parameters in schema order, required ones mandatory; string values raw text.
Expected<std::string> qwen_xml_call(const Tool& tool, size_t index, JsonGrammarWriter& writer, std::string& rules) {
  const std::string base = tool_rule_name(tool.name, index);
  OrderedJson props = tool.parameters.contains("properties") && tool.parameters["properties"].is_object()
                         ? tool.parameters["properties"] : OrderedJson::object();
  std::set<std::string> required;
  if (tool.parameters.contains("required") && tool.parameters["required"].is_array())
    for (const OrderedJson& r : tool.parameters["required"])
      if (r.is_string()) {
        required.insert(r.get<std::string>());
        if (!props.contains(r.get<std::string>())) props[r.get<std::string>()] = OrderedJson::object();  // undeclared: text
      }
  std::string body = gbnf_literal("<function=" + tool.name + ">\n");
  int i = 0;
  for (const auto& [arg, schema] : props.items()) {
    const std::string param = fmt::format("{}-p{}", base, i++);
    const std::string type = xml_value_type(schema);
    std::string value;
    if (type.empty() || type == "string" || type == "str" || type == "text") {
      if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array() && !schema["enum"].empty()) {
        std::string alts;
        for (const OrderedJson& v : schema["enum"])
          alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.is_string() ? v.get<std::string>() : v.dump());
        value = "(" + alts + ") " + gbnf_literal("\n</parameter>");
      } else if (schema.is_object() && schema.contains("maxLength") && schema["maxLength"].is_number_unsigned() &&
                 schema["maxLength"].get<uint64_t>() <= 10000) {
        // Bounded: up to maxLength characters, none of them '<' (so no markup can start inside).
        const uint64_t lo = schema.contains("minLength") && schema["minLength"].is_number_unsigned() ? schema["minLength"].get<uint64_t>() : 0;
        value = fmt::format("[^<]{{{},{}}} {}", std::min(lo, schema["maxLength"].get<uint64_t>()), schema["maxLength"].get<uint64_t>(),
                            gbnf_literal("</parameter>"));
      } else {
        // Raw text up to </parameter>; it must not hold markup the parsers look for.
        rules += gbnf_text_until(param + "-text", "</parameter>", {"<parameter=", "</function>", "</tool_call>"});
        value = param + "-text";
      }
    } else {
      KAPITSA_TRY(std::string json, writer.add_schema(schema, param + "-json", &tool.parameters));  // $refs: the tool's
      value = json + " " + gbnf_literal("\n</parameter>");
    }
    rules += fmt::format("{} ::= {} {} {}\n", param, gbnf_literal("<parameter=" + arg + ">\n"), value, gbnf_literal("\n"));
    body += required.contains(arg) ? " " + param : " " + param + "?";
  }
  body += " " + gbnf_literal("</function>\n");
  rules += fmt::format("{} ::= {}\n", base, body);
  return base;
}

}  // namespace

Expected<std::string> tool_call_gbnf(ToolFormat format, const OrderedJson& tools, const GrammarStart& start) {
  KAPITSA_TRY(std::vector<Tool> list, read_tools(tools));
  JsonGrammarWriter writer;
  // The block's closing tag inside a JSON string would end the block early for the output parser.
  if (format == ToolFormat::hermes_json) writer.forbid_in_strings({"</tool_call>"});
  if (format == ToolFormat::qwen_xml) writer.forbid_in_strings({"</tool_call>", "</parameter>", "<parameter=", "</function>"});
  if (format == ToolFormat::nemotron) writer.forbid_in_strings({"</TOOLCALL>"});
  std::string rules, calls;
  for (size_t i = 0; i < list.size(); ++i) {
    const Tool& tool = list[i];
    std::string call;
    if (format == ToolFormat::qwen_xml) {
      KAPITSA_TRY(std::string r, qwen_xml_call(tool, i, writer, rules));
      call = r;
    } else if (format == ToolFormat::hermes_json || format == ToolFormat::nemotron) {
      KAPITSA_TRY(std::string args, writer.add_schema(tool.parameters, tool_rule_name(tool.name, i) + "-args"));
      call = fmt::format("({} {} {})", gbnf_literal("{\"name\": " + OrderedJson(tool.name).dump() + ", \"arguments\": "), args, gbnf_literal("}"));
    } else {
      return error("tool-call grammar: the model has no tool-call format");
    }
    calls += (calls.empty() ? "" : " | ") + call;
  }
  std::string out;
  switch (format) {
    case ToolFormat::qwen_xml:
      out = fmt::format("root ::= reasoning {} ( {} ) {}\n", gbnf_literal("<tool_call>\n"), calls, gbnf_literal("</tool_call>"));
      break;
    case ToolFormat::hermes_json:
      out = fmt::format("root ::= reasoning {} ( {} ) {}\n", gbnf_literal("<tool_call>\n"), calls, gbnf_literal("\n</tool_call>"));
      break;
    default:
      out = fmt::format("root ::= reasoning {} ( {} ) {}\n", gbnf_literal("<TOOLCALL>["), calls, gbnf_literal("]</TOOLCALL>"));
      break;
  }
  gbnf_reasoning_prefix("reasoning", start, out);
  return out + rules + writer.rules();
}

Expected<std::string> tool_call_gbnf(ToolFormat format, const Json& tools, const GrammarStart& start) {
  return tool_call_gbnf(format, OrderedJson::parse(tools.dump()), start);
}

Expected<std::shared_ptr<const Grammar>> grammar_for_tool_call(ToolFormat format, const OrderedJson& tools, const GrammarStart& start) {
  KAPITSA_TRY(std::string gbnf, tool_call_gbnf(format, tools, start));
  auto g = parse_gbnf(gbnf);
  if (!g.ok()) return error("tool-call grammar: internal grammar error: {}", g.error().message);
  return g;
}

Expected<std::shared_ptr<const Grammar>> grammar_for_tool_call(ToolFormat format, const Json& tools, const GrammarStart& start) {
  return grammar_for_tool_call(format, OrderedJson::parse(tools.dump()), start);
}

}  // namespace kapitsa::text
