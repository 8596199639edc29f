// ChatTemplate (see chat_template.h).
#include "text/chat/chat_template.h"

#include "text/jinja/error.h"
#include "text/jinja/json_value.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kapitsa::text {
namespace {

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("{}: cannot open file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error("{}: read failed", path);
  return ss.str();
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_source(std::string_view source, std::string name) {
  KAPITSA_TRY(jinja::Template t, jinja::Template::parse(source, std::move(name)));
  return ChatTemplate(std::move(t), std::string(source));
}

Expected<ChatTemplate> ChatTemplate::from_file(const std::string& path) {
  KAPITSA_TRY(std::string text, read_text(path));
  return from_source(text, path);
}

Expected<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  OrderedJson config = OrderedJson::object();
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    KAPITSA_TRY(std::string text, read_text(config_path));
    config = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) return error("{}: not a JSON object", config_path);
  }
  OrderedJson specials = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) specials[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) specials[key] = (*it)["content"];
  }

  Expected<ChatTemplate> result = error("unreachable");
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path, ec)) {
    result = from_file(jinja_path);
  } else {
    auto it = config.find("chat_template");
    if (it == config.end()) return error("{}: no chat_template.jinja and no 'chat_template' in {}", dir, config_path);
    if (it->is_string()) {
      result = from_source(it->get<std::string>(), config_path + ":chat_template");
    } else if (it->is_array()) {
      const OrderedJson* chosen = nullptr;
      for (const auto& entry : *it) {
        if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) continue;
        if (!chosen || (entry.contains("name") && entry["name"] == "default")) chosen = &entry;
      }
      if (!chosen) return error("{}: 'chat_template' list has no usable template", config_path);
      result = from_source((*chosen)["template"].get<std::string>(), config_path + ":chat_template");
    } else {
      return error("{}: 'chat_template' must be a string or a list", config_path);
    }
  }
  if (result.ok()) result->set_default_variables(std::move(specials));
  return result;
}

Expected<std::string> ChatTemplate::render(const ChatRequest& request, const ChatOptions& options) const {
  // The variables as Jinja values, built straight from the request (an agent's conversation is long:
  // no normalised copy of it, and no JSON context to convert again). Key order as a JSON object would
  // have it: messages, tools, documents, add_generation_prompt, then defaults and kwargs on top.
  if (!request.messages.is_array()) return error("messages must be an array");
  auto context = jinja::make_dict();
  try {
    jinja::List messages;
    messages.reserve(request.messages.size());
    for (size_t i = 0; i < request.messages.size(); ++i) {
      KAPITSA_TRY(std::optional<OrderedJson> changed, prepare_message(request.messages[i], i, options));
      messages.push_back(jinja::from_json(changed ? *changed : request.messages[i]));
    }
    context->set(jinja::Value("messages"), jinja::Value(std::move(messages)));
    context->set(jinja::Value("tools"), jinja::from_json(request.tools));  // None when absent, as transformers passes tools=None
    context->set(jinja::Value("documents"), jinja::Value::none());
    context->set(jinja::Value("add_generation_prompt"), jinja::Value(request.add_generation_prompt));
    for (const OrderedJson* vars : {&defaults_, &request.kwargs})
      for (auto it = vars->begin(); it != vars->end(); ++it) context->set(jinja::Value(it.key()), jinja::from_json(it.value()));
  } catch (const jinja::TemplateError& e) {  // values nested too deep
    return error("{}: {}", template_.name(), e.what());
  }
  return template_.render(*context);
}

}  // namespace kapitsa::text
