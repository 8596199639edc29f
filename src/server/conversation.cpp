// Conversation normalisation (see conversation.h).
#include "server/conversation.h"

#include <fmt/format.h>

#include <algorithm>

namespace kapitsa::server {
namespace {

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

OJson default_parameters() { return OJson{{"type", "object"}, {"properties", OJson::object()}}; }

// {"type":"function","function":{name, description?, parameters}}: only the fields templates read, so
// client-specific extras (strict, cache_control) never reach the prompt.
OJson function_tool(const std::string& name, const OJson* description, const OJson* parameters) {
  OJson fn = OJson::object();
  fn["name"] = name;
  if (description && description->is_string()) fn["description"] = *description;
  fn["parameters"] = parameters && parameters->is_object() ? *parameters : default_parameters();
  return OJson{{"type", "function"}, {"function", std::move(fn)}};
}

const OJson* find(const OJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string string_field(const OJson& obj, const char* key) {
  const OJson* v = find(obj, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

struct ToolCollector {
  NormalizedTools out;
  std::set<std::string> seen;

  void add(OJson tool, bool custom) {
    const std::string name = tool["function"]["name"].get<std::string>();
    if (!seen.insert(name).second) return;  // first definition wins
    if (custom) out.custom_names.insert(name);
    out.tools.push_back(std::move(tool));
  }

  std::optional<ApiError> collect(const OJson& tool, const std::string& where) {
    if (!tool.is_object()) return invalid_request(fmt::format("{} must be an object", where), where);
    const std::string type = string_field(tool, "type");
    // Anthropic client tools: {name, description, input_schema} (type absent or "custom").
    if (const OJson* schema = find(tool, "input_schema")) {
      std::string name = string_field(tool, "name");
      if (name.empty()) return invalid_request(fmt::format("{}.name is required", where), where + ".name");
      add(function_tool(name, find(tool, "description"), schema), false);
      return std::nullopt;
    }
    if (type == "function") {
      const OJson* fn = find(tool, "function");
      const OJson& src = fn && fn->is_object() ? *fn : tool;  // chat shape, or the flat Responses shape
      std::string name = string_field(src, "name");
      if (name.empty()) {
        const std::string field = fn ? where + ".function.name" : where + ".name";
        return invalid_request(fmt::format("{} is required", field), field);
      }
      add(function_tool(name, find(src, "description"), find(src, "parameters")), false);
      return std::nullopt;
    }
    if (type == "namespace") {  // Codex: a group of functions; the model calls them by their own names
      const OJson* nested = find(tool, "tools");
      if (!nested || !nested->is_array()) return std::nullopt;
      for (size_t i = 0; i < nested->size(); ++i)
        if (auto e = collect((*nested)[i], fmt::format("{}.tools[{}]", where, i))) return e;
      return std::nullopt;
    }
    if (type == "custom") {  // freeform text input (Codex apply_patch): one string argument
      std::string name = string_field(tool, "name");
      if (name.empty()) return invalid_request(fmt::format("{}.name is required", where), where + ".name");
      OJson params = {{"type", "object"},
                      {"properties",
                       {{kCustomToolArgument,
                         {{"type", "string"},
                          {"description", "The raw freeform input for this tool, verbatim (not JSON)."}}}}},
                      {"required", {kCustomToolArgument}}};
      add(function_tool(name, find(tool, "description"), &params), true);
      return std::nullopt;
    }
    if (type == "tool_search") {  // executed by the client, described by a JSON schema
      std::string name = string_field(tool, "name");
      add(function_tool(name.empty() ? "tool_search" : name, find(tool, "description"), find(tool, "parameters")),
          false);
      return std::nullopt;
    }
    return std::nullopt;  // hosted tools (web_search, file_search, server tools): the model cannot run them
  }
};

// Arguments of a call in the history as the object templates iterate: clients send a JSON string
// (sometimes malformed, or empty); text that is not a JSON object is kept under "raw" rather than
// failing the whole request in the template.
OJson history_arguments(const OJson* args) {
  if (!args || args->is_null()) return OJson::object();
  if (args->is_object()) return *args;
  if (!args->is_string()) return OJson{{"raw", args->dump()}};
  const std::string& text = args->get_ref<const std::string&>();
  if (is_blank(text)) return OJson::object();
  OJson parsed = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : OJson{{"raw", text}};
}

}  // namespace

std::string content_text(const OJson& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const auto& part : content) {
    if (part.is_string()) {
      out += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) continue;
    const std::string type = string_field(part, "type");
    if (type == "text" || type == "input_text" || type == "output_text") {
      out += string_field(part, "text");
    } else if (type == "refusal") {
      out += string_field(part, "refusal");
    }
  }
  return out;
}

std::string conversation_key(const std::string& session, const OJson& messages) {
  // FNV-1a over role and content of the first two messages: stable across processes and runs.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // a separator, so ("ab","c") and ("a","bc") differ
  };
  for (size_t i = 0; i < std::min<size_t>(2, messages.size()); ++i) {
    mix(string_field(messages[i], "role"));
    mix(string_field(messages[i], "content"));
  }
  return fmt::format("{}#{:016x}", session, h);
}

std::string strip_volatile_lines(std::string text) {
  if (text.find("x-anthropic-billing-header") == std::string::npos) return text;
  std::string out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    const size_t first = line.find_first_not_of(" \t");
    const bool is_volatile = first != std::string_view::npos && line.substr(first).starts_with("x-anthropic-billing-header");
    if (!is_volatile) {
      out.append(line);
      if (end < text.size()) out += '\n';
    }
    pos = end + 1;
  }
  return out;
}

ApiResult<NormalizedTools> normalize_tools(const OJson& tools, const std::string& where) {
  ToolCollector c;
  if (tools.is_null()) return c.out;
  if (!tools.is_array()) return invalid_request(fmt::format("{} must be an array", where), where);
  c.out.tools = OJson::array();
  for (size_t i = 0; i < tools.size(); ++i)
    if (auto e = c.collect(tools[i], fmt::format("{}[{}]", where, i))) return *e;
  if (c.out.tools.empty()) c.out.tools = nullptr;  // only hosted tools: render as a tool-less request
  return c.out;
}

std::optional<ApiError> check_text_parts(const OJson& parts, const std::string& where) {
  for (size_t j = 0; j < parts.size(); ++j) {
    if (!parts[j].is_object()) continue;
    const std::string type = string_field(parts[j], "type");
    // Images, audio and files would be dropped without a word: the models served take text only.
    if (type == "image_url" || type == "input_image" || type == "image" || type == "input_audio" || type == "audio" ||
        type == "file" || type == "input_file" || type == "document" || type == "video" || type == "video_url")
      return invalid_request(fmt::format("{}[{}] is a content part of type '{}': this model reads text only", where, j, type),
                             fmt::format("{}[{}]", where, j));
  }
  return std::nullopt;
}

ApiResult<OJson> normalize_messages(OJson messages) {
  if (!messages.is_array()) return invalid_request("messages must be an array", "messages");
  OJson out = OJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    OJson& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return invalid_request(where + " must be an object", where);
    std::string role = string_field(m, "role");
    if (role == "developer") role = "system";
    if (role == "function") role = "tool";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      return invalid_request(fmt::format("{}.role must be one of system, developer, user, assistant, tool (got {})",
                                         where, find(m, "role") ? find(m, "role")->dump() : "nothing"),
                             where + ".role");
    const OJson* content = find(m, "content");
    if (content && !content->is_null() && !content->is_string() && !content->is_array())
      return invalid_request(where + ".content must be a string or an array of content parts", where + ".content");
    if (content && content->is_array())
      if (auto e = check_text_parts(*content, where + ".content")) return *e;
    // A string content is moved out (the common case); parts are joined.
    std::string text = content && content->is_string() ? std::move(m["content"].get_ref<std::string&>())
                       : content                        ? content_text(*content)
                                                        : std::string();

    if (role == "system") {
      text = strip_volatile_lines(std::move(text));
      if (is_blank(text)) continue;
      const bool leading = out.empty() || (out.size() == 1 && out[0]["role"] == "system");
      if (leading) {
        if (out.empty()) {
          out.push_back(OJson{{"role", "system"}, {"content", text}});
        } else {
          out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
        }
      } else if (out.back()["role"] == "user") {
        // A system message after the conversation started (Claude Code's mid-conversation system):
        // templates only allow one system turn at the start, so it joins the user turn before it.
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n\n" + text;
      } else {
        out.push_back(OJson{{"role", "user"}, {"content", text}});
      }
      continue;
    }

    OJson n = OJson::object();
    n["role"] = role;
    n["content"] = std::move(text);
    if (role == "assistant") {
      for (const char* key : {"reasoning_content", "reasoning", "reasoning_text"}) {
        const OJson* r = find(m, key);
        if (r && r->is_string() && !r->get_ref<const std::string&>().empty()) {
          n["reasoning_content"] = std::move(m[key]);
          break;
        }
      }
      if (const OJson* calls = find(m, "tool_calls"); calls && calls->is_array() && !calls->empty()) {
        OJson norm = OJson::array();
        for (size_t j = 0; j < calls->size(); ++j) {
          const OJson& c = (*calls)[j];
          const std::string cw = fmt::format("{}.tool_calls[{}]", where, j);
          const OJson* fn = c.is_object() ? find(c, "function") : nullptr;
          if (!fn || !fn->is_object() || string_field(*fn, "name").empty())
            return invalid_request(cw + ".function.name is required", cw + ".function.name");
          OJson call = OJson::object();
          call["id"] = string_field(c, "id");
          call["type"] = "function";
          call["function"] = OJson{{"name", string_field(*fn, "name")}, {"arguments", history_arguments(find(*fn, "arguments"))}};
          norm.push_back(std::move(call));
        }
        n["tool_calls"] = std::move(norm);
      }
    } else if (role == "tool") {
      if (std::string id = string_field(m, "tool_call_id"); !id.empty()) n["tool_call_id"] = id;
      if (std::string name = string_field(m, "name"); !name.empty()) n["name"] = name;
    }
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace kapitsa::server
