// Reading output constraints from the three APIs' request fields (see constraint.h).
#include "server/constraint.h"

#include "text/grammar/json_schema.h"
#include "text/grammar/tool_call_grammar.h"

namespace kapitsa::server {
namespace {

using Kind = OutputConstraint::Kind;

OutputConstraint forced_tool(std::string name = {}) {
  OutputConstraint c;
  c.kind = Kind::tool_call;
  c.tool_name = std::move(name);
  return c;
}

// A named-tool choice must carry a non-empty string name.
ApiResult<OutputConstraint> named_tool(const OJson& holder, const std::string& where) {
  auto it = holder.find("name");
  if (it == holder.end() || !it->is_string() || it->get<std::string>().empty())
    return invalid_request(where + ".name must be the name of one of the tools", where + ".name");
  return forced_tool(it->get<std::string>());
}

// The shared {"type":"text"|"json_object"|"json_schema", ...schema} reading; `schema` is where the
// schema lives for json_schema (OpenAI chat nests it under json_schema, Responses and Anthropic don't).
ApiResult<OutputConstraint> format_constraint(const OJson& format, const OJson* schema, const std::string& where) {
  if (format.is_null()) return OutputConstraint{};
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    return invalid_request(where + " must be an object with a type", where);
  const std::string type = format["type"].get<std::string>();
  OutputConstraint c;
  if (type == "text") return c;
  if (type == "json_object") {
    c.kind = Kind::json_object;
    return c;
  }
  if (type == "json_schema") {
    if (!schema || !(schema->is_object() || schema->is_boolean()))
      return invalid_request(where + ": json_schema needs a schema object", where);
    c.kind = Kind::json_schema;
    c.schema = *schema;
    return c;
  }
  return invalid_request(where + ".type must be text, json_object or json_schema, not \"" + type + "\"", where + ".type");
}

// OpenAI tool_choice strings, shared by chat and Responses.
std::optional<ApiResult<OutputConstraint>> openai_choice_string(const OJson& tc) {
  if (!tc.is_string()) return std::nullopt;
  const std::string s = tc.get<std::string>();
  if (s == "none" || s == "auto") return ApiResult<OutputConstraint>(OutputConstraint{});
  if (s == "required") return ApiResult<OutputConstraint>(forced_tool());
  return ApiResult<OutputConstraint>(
      invalid_request("tool_choice must be none, auto, required or a tool object, not \"" + s + "\"", "tool_choice"));
}

}  // namespace

ApiResult<OutputConstraint> openai_chat_constraint(const OJson& body) {
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (auto r = openai_choice_string(*tc)) {
      if (std::get_if<ApiError>(&*r) || std::get<OutputConstraint>(*r).kind != Kind::none) return *r;
    } else if (tc->is_object() && tc->value("type", "") == "function" && tc->contains("function") &&
               (*tc)["function"].is_object()) {
      return named_tool((*tc)["function"], "tool_choice.function");
    } else {
      return invalid_request("tool_choice must be none, auto, required or {\"type\":\"function\",\"function\":{\"name\":…}}",
                             "tool_choice");
    }
  }
  auto rf = body.find("response_format");
  if (rf == body.end()) return OutputConstraint{};
  const OJson* schema = nullptr;
  if (rf->is_object())
    if (auto js = rf->find("json_schema"); js != rf->end() && js->is_object())
      if (auto s = js->find("schema"); s != js->end()) schema = &*s;
  return format_constraint(*rf, schema, "response_format");
}

ApiResult<OutputConstraint> responses_constraint(const OJson& body) {
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (auto r = openai_choice_string(*tc)) {
      if (std::get_if<ApiError>(&*r) || std::get<OutputConstraint>(*r).kind != Kind::none) return *r;
    } else if (tc->is_object()) {
      const std::string type = tc->value("type", "");
      if (type == "function" || type == "custom") return named_tool(*tc, "tool_choice");
      if (type == "allowed_tools") {
        // Restricting to a subset is not enforced (every offered tool stays allowed); "required" still forces a call.
        if (tc->value("mode", "auto") == "required") return forced_tool();
      } else if (type != "auto" && type != "none") {
        return invalid_request("tool_choice.type \"" + type + "\" is not supported", "tool_choice.type");
      }
    } else {
      return invalid_request("tool_choice must be a string or an object", "tool_choice");
    }
  }
  auto text = body.find("text");
  if (text == body.end() || text->is_null()) return OutputConstraint{};
  if (!text->is_object()) return invalid_request("text must be an object", "text");
  auto format = text->find("format");
  if (format == text->end()) return OutputConstraint{};
  const OJson* schema = nullptr;
  if (format->is_object())
    if (auto s = format->find("schema"); s != format->end()) schema = &*s;
  return format_constraint(*format, schema, "text.format");
}

ApiResult<OutputConstraint> anthropic_constraint(const OJson& body) {
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (!tc->is_object() || !tc->contains("type") || !(*tc)["type"].is_string())
      return invalid_request("tool_choice must be an object with a type", "tool_choice");
    const std::string type = (*tc)["type"].get<std::string>();
    if (type == "any") return forced_tool();
    if (type == "tool") return named_tool(*tc, "tool_choice");
    if (type != "auto" && type != "none")
      return invalid_request("tool_choice.type must be auto, any, tool or none, not \"" + type + "\"", "tool_choice.type");
  }
  const OJson* format = nullptr;
  std::string where;
  if (auto oc = body.find("output_config"); oc != body.end() && oc->is_object())
    if (auto f = oc->find("format"); f != oc->end() && !f->is_null()) format = &*f, where = "output_config.format";
  if (!format)
    if (auto f = body.find("output_format"); f != body.end() && !f->is_null()) format = &*f, where = "output_format";
  if (!format) return OutputConstraint{};
  const OJson* schema = nullptr;
  if (format->is_object())
    if (auto s = format->find("schema"); s != format->end()) schema = &*s;
  return format_constraint(*format, schema, where);
}

ApiResult<std::shared_ptr<const text::Grammar>> constraint_grammar(const OutputConstraint& c, const OJson& tools,
                                                                   text::ToolFormat format,
                                                                   const text::GrammarStart& start) {
  using Result = ApiResult<std::shared_ptr<const text::Grammar>>;
  auto built = [](Expected<std::shared_ptr<const text::Grammar>> g, const std::string& where) -> Result {
    if (!g.ok()) return api_error(g.error(), where + ": ", where);
    return *g;
  };
  switch (c.kind) {
    case Kind::none: return std::shared_ptr<const text::Grammar>();
    case Kind::json_object: return built(text::grammar_for_json_object(start), "response_format");
    case Kind::json_schema: return built(text::grammar_from_json_schema(c.schema, start), "response_format");
    case Kind::tool_call: break;
  }
  if (!tools.is_array() || tools.empty()) return invalid_request("tool_choice forces a tool call but no tools were given", "tool_choice");
  if (format == text::ToolFormat::none)
    return invalid_request("this model's chat template defines no tool-call format, so a tool call cannot be forced",
                           "tool_choice");
  OJson allowed = OJson::array();
  for (const auto& t : tools)
    if (c.tool_name.empty() || (t.contains("function") && t["function"].value("name", "") == c.tool_name)) allowed.push_back(t);
  if (allowed.empty()) return invalid_request("tool_choice names \"" + c.tool_name + "\", which is not among the tools", "tool_choice");
  return built(text::grammar_for_tool_call(format, allowed, start), "tools");
}

}  // namespace kapitsa::server
