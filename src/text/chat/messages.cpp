// Conversation input (see messages.h).
#include "text/chat/messages.h"

namespace kapitsa::text {

Expected<ChatRequest> chat_request_from_json(const OrderedJson& conversation, const std::string& where) {
  if (!conversation.is_object()) return error("{}: a conversation must be a JSON object", where);
  ChatRequest request;
  auto messages = conversation.find("messages");
  if (messages == conversation.end() || !messages->is_array())
    return error("{}: 'messages' must be an array", where);
  request.messages = *messages;
  if (auto tools = conversation.find("tools"); tools != conversation.end() && !tools->is_null()) {
    if (!tools->is_array()) return error("{}: 'tools' must be an array", where);
    request.tools = *tools;
  }
  if (auto agp = conversation.find("add_generation_prompt"); agp != conversation.end()) {
    if (!agp->is_boolean()) return error("{}: 'add_generation_prompt' must be true or false", where);
    request.add_generation_prompt = agp->get<bool>();
  }
  if (auto kwargs = conversation.find("kwargs"); kwargs != conversation.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) return error("{}: 'kwargs' must be an object", where);
    request.kwargs = *kwargs;
  }
  return request;
}

namespace {

// A text-only parts list ([{"type": "text", "text": "..."}, ...]) as one string, or null.
OrderedJson flatten_parts(const OrderedJson& content) {
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) return nullptr;
    auto type = part.find("type");
    auto t = part.find("text");
    if (type == part.end() || *type != "text" || t == part.end() || !t->is_string()) return nullptr;
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

Expected<std::optional<OrderedJson>> prepare_message(const OrderedJson& m, size_t i, const ChatOptions& options) {
  if (!m.is_object()) return error("messages[{}] must be an object", i);
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return error("messages[{}].role must be a string", i);
  std::optional<OrderedJson> out;
  if (options.flatten_text_parts) {
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      OrderedJson flat = flatten_parts(*content);
      if (!flat.is_null()) {
        out = m;
        (*out)["content"] = std::move(flat);
      }
    }
  }
  auto calls = m.find("tool_calls");
  if (calls == m.end() || !calls->is_array()) return out;
  for (size_t j = 0; j < calls->size(); ++j) {
    const OrderedJson& call = (*calls)[j];
    if (!call.is_object()) return error("messages[{}].tool_calls[{}] must be an object", i, j);
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args == fn->end() || !args->is_string()) continue;
    // Clients send arguments as a JSON string; templates iterate them as a mapping. Text that is
    // not a JSON object stays a string (templates print strings verbatim).
    OrderedJson parsed = OrderedJson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) continue;
    if (!out) out = m;
    (*out)["tool_calls"][j]["function"]["arguments"] = std::move(parsed);
  }
  return out;
}

Expected<OrderedJson> prepare_messages(const OrderedJson& messages, const ChatOptions& options) {
  if (!messages.is_array()) return error("messages must be an array");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    KAPITSA_TRY(std::optional<OrderedJson> m, prepare_message(messages[i], i, options));
    out.push_back(m ? std::move(*m) : messages[i]);
  }
  return out;
}

}  // namespace kapitsa::text
