// Tool-call body parsers (see tool_calls.h). Lenient where models are known to slip (a missing
// </parameter> or </function>, arguments given as a JSON string), strict where guessing would invent
// data (no function name, JSON that does not parse).
#include "text/parse/tool_calls.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace kapitsa::text {
namespace {

// Model output may hold invalid UTF-8; nlohmann would throw on it, so it is replaced (U+FFFD).
std::string dump(const OrderedJson& j) { return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// The declared type name of a schema: "type" as a string, the first non-null entry of a "type" list,
// or the type of the first anyOf/oneOf alternative that has one. Empty when undeclared.
std::string schema_type(const Json& schema, bool& nullable) {
  nullable = false;
  if (!schema.is_object()) return {};
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_string()) return lower(t.get<std::string>());
    if (t.is_array()) {
      std::string first;
      for (const Json& e : t) {
        if (!e.is_string()) continue;
        if (e.get<std::string>() == "null") nullable = true;
        else if (first.empty()) first = lower(e.get<std::string>());
      }
      return first;
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    std::string first;
    for (const Json& alt : schema[key]) {
      bool n = false;
      const std::string t = schema_type(alt, n);
      if (t.empty() && alt.is_object() && alt.value("type", Json()) == "null") nullable = true;
      if (!t.empty() && first.empty()) first = t;
    }
    return first;
  }
  if (schema.contains("enum")) return "string";
  return {};
}

// Turns a parsed {"name", "arguments"|"parameters"} object into a ToolCall.
Expected<ToolCall> call_from_object(const OrderedJson& o, const std::string& where) {
  if (!o.is_object()) return error("{}: expected a JSON object", where);
  auto name = o.find("name");
  if (name == o.end() || !name->is_string() || name->get<std::string>().empty())
    return error("{}: missing \"name\"", where);
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = o.find("arguments");
  if (args == o.end()) args = o.find("parameters");
  if (args == o.end() || args->is_null()) return call;
  if (args->is_object()) {
    call.arguments = dump(*args);
  } else if (args->is_string()) {  // arguments written as a JSON string
    OrderedJson inner = OrderedJson::parse(args->get<std::string>(), nullptr, false);
    if (inner.is_discarded() || !inner.is_object())
      return error("{}: \"arguments\" is a string that does not hold a JSON object", where);
    call.arguments = dump(inner);
  } else {
    return error("{}: \"arguments\" must be an object", where);
  }
  return call;
}

}  // namespace

Json parameter_schema(const Json& tools, std::string_view name, std::string_view arg) {
  if (!tools.is_array()) return Json();
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    const Json& f = tool.contains("function") && tool["function"].is_object() ? tool["function"] : tool;
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>() != name) continue;
    const char* key = f.contains("parameters") ? "parameters" : "input_schema";
    if (!f.contains(key) || !f[key].is_object()) return Json();
    const Json& props = (*f.find(key)).value("properties", Json());
    if (!props.is_object() || !props.contains(std::string(arg))) return Json();
    return props[std::string(arg)];
  }
  return Json();
}

OrderedJson convert_parameter(std::string_view value, const Json& schema) {
  bool nullable = false;
  const std::string type = schema_type(schema, nullable);
  if (type.empty() || type == "string" || type == "str" || type == "text") return OrderedJson(std::string(value));
  const std::string_view v = trim(value);
  if (lower(v) == "null") return OrderedJson();
  if (type == "integer" || type == "int") {
    int64_t i = 0;
    auto r = std::from_chars(v.data(), v.data() + v.size(), i);
    if (r.ec == std::errc() && r.ptr == v.data() + v.size()) return OrderedJson(i);
  }
  if (type == "number" || type == "float" || type == "integer" || type == "int") {
    double d = 0;
    auto r = std::from_chars(v.data(), v.data() + v.size(), d);
    if (r.ec == std::errc() && r.ptr == v.data() + v.size() && std::isfinite(d)) {
      if (d == std::floor(d) && std::fabs(d) < 9e15 && v.find_first_of(".eE") == std::string_view::npos)
        return OrderedJson(static_cast<int64_t>(d));
      return OrderedJson(d);
    }
  }
  if (type == "boolean" || type == "bool") {
    const std::string l = lower(v);
    if (l == "true") return OrderedJson(true);
    if (l == "false") return OrderedJson(false);
  }
  if (type == "object" || type == "array" || type == "dict" || type == "list") {
    OrderedJson j = OrderedJson::parse(v, nullptr, false);
    if (!j.is_discarded()) return j;
  }
  return OrderedJson(std::string(value));  // not convertible: keep what the model wrote
}

Expected<std::vector<ToolCall>> parse_qwen_xml_call(std::string_view body, const Json& tools) {
  static constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>",
                                    kParameter = "<parameter=", kParameterEnd = "</parameter>";
  std::vector<ToolCall> calls;
  size_t pos = 0;
  while (true) {
    const size_t f = body.find(kFunction, pos);
    if (f == std::string_view::npos) {
      if (!trim(body.substr(pos)).empty())
        return error("unexpected text {} in a tool call", dump(OrderedJson(std::string(trim(body.substr(pos))))));
      break;
    }
    if (!trim(body.substr(pos, f - pos)).empty())
      return error("unexpected text before <function=...> in a tool call");
    const size_t name_end = body.find('>', f + kFunction.size());
    if (name_end == std::string_view::npos) return error("unterminated <function=... tag");
    ToolCall call;
    call.name = std::string(trim(body.substr(f + kFunction.size(), name_end - f - kFunction.size())));
    if (call.name.empty()) return error("a <function=> tag without a name");
    size_t end = body.find(kFunctionEnd, name_end);
    const bool closed = end != std::string_view::npos;
    if (!closed) end = body.size();  // tolerated: the call ran to the end of the block
    const std::string_view inner = body.substr(name_end + 1, end - name_end - 1);

    OrderedJson args = OrderedJson::object();
    size_t p = 0;
    while (true) {
      const size_t a = inner.find(kParameter, p);
      if (a == std::string_view::npos) break;
      const size_t arg_end = inner.find('>', a + kParameter.size());
      if (arg_end == std::string_view::npos) return error("unterminated <parameter=... tag in {}", call.name);
      const std::string arg(trim(inner.substr(a + kParameter.size(), arg_end - a - kParameter.size())));
      if (arg.empty()) return error("a <parameter=> tag without a name in {}", call.name);
      // The value runs to </parameter>, or (a known slip) to the next <parameter=.
      size_t value_end = inner.find(kParameterEnd, arg_end);
      const size_t next = inner.find(kParameter, arg_end);
      size_t resume;
      if (value_end == std::string_view::npos || (next != std::string_view::npos && next < value_end)) {
        value_end = next == std::string_view::npos ? inner.size() : next;
        resume = value_end;
      } else {
        resume = value_end + kParameterEnd.size();
      }
      std::string_view value = inner.substr(arg_end + 1, value_end - arg_end - 1);
      // The template writes the value on its own lines: one newline either side is markup.
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      args[arg] = convert_parameter(value, parameter_schema(tools, call.name, arg));
      p = resume;
    }
    call.arguments = dump(args);
    calls.push_back(std::move(call));
    pos = closed ? end + kFunctionEnd.size() : body.size();
  }
  if (calls.empty()) return error("no <function=...> in a tool call");
  return calls;
}

Expected<std::vector<ToolCall>> parse_hermes_call(std::string_view body) {
  const OrderedJson j = OrderedJson::parse(trim(body), nullptr, false);
  if (j.is_discarded()) return error("tool call is not valid JSON");
  KAPITSA_TRY(ToolCall call, call_from_object(j, "tool call"));
  return std::vector<ToolCall>{std::move(call)};
}

Expected<std::vector<ToolCall>> parse_nemotron_calls(std::string_view body) {
  const OrderedJson j = OrderedJson::parse(trim(body), nullptr, false);
  if (j.is_discarded()) return error("TOOLCALL block is not valid JSON");
  std::vector<ToolCall> calls;
  if (j.is_object()) {
    KAPITSA_TRY(ToolCall call, call_from_object(j, "TOOLCALL"));
    calls.push_back(std::move(call));
    return calls;
  }
  if (!j.is_array() || j.empty()) return error("TOOLCALL block must hold a non-empty JSON array");
  for (size_t i = 0; i < j.size(); ++i) {
    KAPITSA_TRY(ToolCall call, call_from_object(j[i], fmt::format("TOOLCALL[{}]", i)));
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace kapitsa::text
