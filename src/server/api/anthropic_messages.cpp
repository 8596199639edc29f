// POST /v1/messages (Anthropic Messages, what Claude Code speaks), streamed and not, and
// POST /v1/messages/count_tokens. Stream: message_start (with usage.input_tokens — older Claude Code
// crashes without it), ping, per block content_block_start / _delta / _stop (thinking blocks end with
// a signature_delta; tool_use starts with "input": {} and gets its arguments as one input_json_delta;
// one block per tool call), message_delta (stop_reason end_turn | tool_use | max_tokens |
// stop_sequence, usage) and message_stop — on every path. Keep-alive: ping events.
#include "server/api/api.h"
#include "server/api/common.h"
#include "server/turn.h"

#include <fmt/format.h>

namespace kapitsa::server::api {
namespace {

std::string join_text_blocks(const OJson& system) {
  if (system.is_string()) return system.get<std::string>();
  std::string out;
  if (!system.is_array()) return out;
  for (const auto& block : system) {
    std::string text = block.is_string() ? block.get<std::string>()
                       : block.is_object() && block.value("type", "") == "text" ? block.value("text", "")
                                                                                : std::string();
    // Claude Code's first system block carries a per-request billing nonce: keep it out of the prompt.
    if (text.empty() || text.starts_with("x-anthropic-")) continue;
    if (!out.empty()) out += "\n\n";
    out += text;
  }
  return out;
}

// Anthropic messages → OpenAI-chat-shaped messages (normalised afterwards).
ApiResult<OJson> to_chat_messages(const OJson& body) {
  OJson out = OJson::array();
  if (auto s = body.find("system"); s != body.end() && !s->is_null()) {
    if (!s->is_string() && !s->is_array()) return invalid_request("system must be a string or an array of text blocks", "system");
    std::string text = join_text_blocks(*s);
    if (!text.empty()) out.push_back({{"role", "system"}, {"content", text}});
  }
  auto messages = body.find("messages");
  if (messages == body.end()) return invalid_request("messages: field required", "messages");
  if (!messages->is_array()) return invalid_request("messages must be an array", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const OJson& m = (*messages)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return invalid_request(where + " must be an object", where);
    const std::string role = m.value("role", "");
    const OJson content = m.value("content", OJson(nullptr));
    if (role != "user" && role != "assistant" && role != "system")
      return invalid_request(where + ".role must be user or assistant", where + ".role");
    if (!content.is_string() && !content.is_array())
      return invalid_request(where + ".content must be a string or an array of content blocks", where + ".content");
    if (content.is_array()) {
      if (auto e = check_text_parts(content, where + ".content")) return *e;
      for (size_t j = 0; j < content.size(); ++j)  // a tool result may carry images too
        if (const OJson& b = content[j]; b.is_object() && b.value("type", "") == "tool_result" && b.contains("content") &&
                                         b["content"].is_array())
          if (auto e = check_text_parts(b["content"], fmt::format("{}.content[{}].content", where, j))) return *e;
    }
    if (content.is_string() || role == "system") {
      out.push_back({{"role", role}, {"content", content.is_string() ? content.get<std::string>() : content_text(content)}});
      continue;
    }
    if (role == "user") {
      std::string text;
      for (const auto& block : content) {
        if (!block.is_object()) continue;
        const std::string type = block.value("type", "");
        if (type == "tool_result") {
          const OJson c = block.value("content", OJson(""));
          std::string result = c.is_string() ? c.get<std::string>() : content_text(c);
          if (block.value("is_error", false) && !result.starts_with("Error")) result = "Error: " + result;
          out.push_back({{"role", "tool"}, {"tool_call_id", block.value("tool_use_id", "")}, {"content", result}});
        } else if (type == "text") {
          text += block.value("text", "");
        }
      }
      if (!text.empty() || out.empty() || out.back()["role"] != "tool") out.push_back({{"role", "user"}, {"content", text}});
      continue;
    }
    OJson msg = {{"role", "assistant"}, {"content", ""}};
    std::string text, thinking;
    OJson calls = OJson::array();
    for (const auto& block : content) {
      if (!block.is_object()) continue;
      const std::string type = block.value("type", "");
      if (type == "text") text += block.value("text", "");
      if (type == "thinking") thinking += block.value("thinking", "");
      if (type == "tool_use")
        calls.push_back({{"id", block.value("id", "")},
                         {"type", "function"},
                         {"function", {{"name", block.value("name", "")}, {"arguments", block.value("input", OJson::object())}}}});
    }
    msg["content"] = text;
    if (!thinking.empty()) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out.push_back(std::move(msg));
  }
  return out;
}

ApiResult<ChatInput> chat_input(const OJson& body) {
  ChatInput input;
  auto raw = to_chat_messages(body);
  if (auto* e = failed(raw)) return *e;
  auto msgs = normalize_messages(std::move(value_of(raw)));
  if (auto* e = failed(msgs)) return *e;
  input.messages = std::move(value_of(msgs));
  auto tools = normalize_tools(body.value("tools", OJson(nullptr)), "tools");
  if (auto* e = failed(tools)) return *e;
  input.tools = std::move(value_of(tools));
  if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_object() && tc->value("type", "") == "none")
    input.offer_tools = false;
  auto constraint = anthropic_constraint(body);
  if (auto* e = failed(constraint)) return *e;
  input.constraint = value_of(constraint);
  input.kwargs = thinking_kwargs(body);
  if (auto t = body.find("thinking"); t != body.end() && t->is_object() && t->value("type", "") == "disabled" &&
                                      !input.kwargs.contains("enable_thinking"))
    input.kwargs["enable_thinking"] = false;
  return input;
}

struct MessagesCall {
  std::string id, model;
  PreparedPrompt prompt;
  std::vector<std::string> stops;
  std::unique_ptr<runtime::Generation> generation;
};

const char* stop_reason(StopKind k) {
  switch (k) {
    case StopKind::length: return "max_tokens";
    case StopKind::tool_calls: return "tool_use";
    case StopKind::stop_sequence: return "stop_sequence";
    default: return "end_turn";
  }
}

OJson tool_input(const std::string& arguments) {
  OJson input = OJson::parse(arguments, nullptr, false);
  return input.is_object() ? input : OJson::object();
}

OJson final_usage(const TurnResult& r, size_t prompt_ids) {
  const auto& s = r.finish.stats;
  const int prompt = s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int>(prompt_ids);
  return {{"input_tokens", prompt - s.cached_prompt_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", s.cached_prompt_tokens},
          {"output_tokens", s.completion_tokens}};
}

void write_stream(Service& service, MessagesCall& call, StreamSink& sink) {
  auto event = [&](const char* type, OJson data) {
    OJson d = {{"type", type}};
    for (auto it = data.begin(); it != data.end(); ++it) d[it.key()] = it.value();
    return sink.write(sse_frame(type, dump(d)));
  };
  int index = -1;
  std::string open;  // type of the open block: "", "text", "thinking"
  auto close_block = [&] {
    if (open.empty()) return true;
    if (open == "thinking" && !event("content_block_delta", {{"index", index}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}))
      return false;
    open.clear();
    return event("content_block_stop", {{"index", index}});
  };
  auto open_block = [&](const std::string& type, OJson block) {
    if (!close_block()) return false;
    ++index;
    open = type;
    return event("content_block_start", {{"index", index}, {"content_block", std::move(block)}});
  };

  OJson message = {{"id", call.id},         {"type", "message"},        {"role", "assistant"},
                   {"content", OJson::array()}, {"model", call.model},    {"stop_reason", nullptr},
                   {"stop_sequence", nullptr},
                   {"usage", {{"input_tokens", call.prompt.ids.size()}, {"cache_creation_input_tokens", 0},
                              {"cache_read_input_tokens", 0}, {"output_tokens", 0}}}};
  TurnCallbacks cb;
  cb.on_event = [&](const text::ParseEvent& e) {
    switch (e.kind) {
      case text::ParseEvent::Kind::reasoning:
        if (open != "thinking" && !open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}})) return false;
        return event("content_block_delta", {{"index", index}, {"delta", {{"type", "thinking_delta"}, {"thinking", e.text}}}});
      case text::ParseEvent::Kind::content:
        if (open != "text" && !open_block("text", {{"type", "text"}, {"text", ""}})) return false;
        return event("content_block_delta", {{"index", index}, {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
      case text::ParseEvent::Kind::tool_call:
        if (!open_block("tool_use", {{"type", "tool_use"}, {"id", new_id("toolu_")}, {"name", e.call.name}, {"input", OJson::object()}}))
          return false;
        if (!event("content_block_delta",
                   {{"index", index}, {"delta", {{"type", "input_json_delta"}, {"partial_json", dump(tool_input(e.call.arguments))}}}}))
          return false;
        return close_block();
      case text::ParseEvent::Kind::warning: return true;
    }
    return true;
  };
  cb.on_idle = [&] { return event("ping", OJson::object()); };

  const bool opened = event("message_start", {{"message", message}}) && event("ping", OJson::object());
  const TurnResult r = service.stream_turn(call.generation, call.prompt, opened, cb);
  if (r.client_gone) return;
  // An answer with no block at all reads as a malformed stream to Claude Code: give it an empty text block.
  if (index < 0 && !open_block("text", {{"type", "text"}, {"text", ""}})) return;
  if (!close_block()) return;
  const StopKind kind = stop_kind(r, call.stops);
  if (kind == StopKind::error &&
      !event("error", {{"error", {{"type", "api_error"}, {"message", "generation failed: " + r.finish.error}}}}))
    return;
  OJson stop_sequence = kind == StopKind::stop_sequence ? OJson(r.finish.matched_stop) : OJson(nullptr);
  if (!event("message_delta", {{"delta", {{"stop_reason", stop_reason(kind)}, {"stop_sequence", stop_sequence}}},
                               {"usage", final_usage(r, call.prompt.ids.size())}}))
    return;
  event("message_stop", OJson::object());
}

HttpResponse respond_whole(Service& service, MessagesCall& call) {
  OJson content = OJson::array();
  auto append_text = [&](const char* type, const char* field, const std::string& text) {
    if (content.empty() || content.back()["type"] != type) {
      OJson block = {{"type", type}, {field, ""}};
      if (std::string(type) == "thinking") block["signature"] = "";
      content.push_back(std::move(block));
    }
    content.back()[field] = content.back()[field].get<std::string>() + text;
  };
  TurnCallbacks cb;
  cb.on_event = [&](const text::ParseEvent& e) {
    if (e.kind == text::ParseEvent::Kind::reasoning) append_text("thinking", "thinking", e.text);
    if (e.kind == text::ParseEvent::Kind::content) append_text("text", "text", e.text);
    if (e.kind == text::ParseEvent::Kind::tool_call)
      content.push_back({{"type", "tool_use"}, {"id", new_id("toolu_")}, {"name", e.call.name}, {"input", tool_input(e.call.arguments)}});
    return true;
  };
  TurnResult r = service.whole_turn(call.generation, call.prompt, cb);
  const StopKind kind = stop_kind(r, call.stops);
  if (kind == StopKind::error) return anthropic_error(ApiError{ErrorKind::internal, "generation failed: " + r.finish.error});
  OJson out = {{"id", call.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", call.model},
               {"content", std::move(content)},
               {"stop_reason", stop_reason(kind)},
               {"stop_sequence", kind == StopKind::stop_sequence ? OJson(r.finish.matched_stop) : OJson(nullptr)},
               {"usage", final_usage(r, call.prompt.ids.size())}};
  return json_response(200, dump(out));
}

}  // namespace

HttpResponse anthropic_error(const ApiError& e) { return with_retry_after(e, json_response(e.status(), anthropic_error_json(e))); }

HttpResponse anthropic_messages(Service& service, const HttpRequest& request) {
  auto body_r = parse_body(request);
  if (auto* e = failed(body_r)) return anthropic_error(*e);
  OJson& body = value_of(body_r);
  if (auto e = service.check_model(body)) return anthropic_error(*e);
  auto max_tokens = opt_int(body, "max_tokens");
  if (auto* e = failed(max_tokens)) return anthropic_error(*e);
  if (!value_of(max_tokens)) return anthropic_error(invalid_request("max_tokens: field required", "max_tokens"));
  if (*value_of(max_tokens) < 1) return anthropic_error(invalid_request("max_tokens: must be at least 1", "max_tokens"));
  auto input = chat_input(body);
  if (auto* e = failed(input)) return anthropic_error(*e);
  auto sampling = sampling_params(body, service.default_sampling());
  if (auto* e = failed(sampling)) return anthropic_error(*e);
  auto stops = stop_strings(body, "stop_sequences");
  if (auto* e = failed(stops)) return anthropic_error(*e);
  auto stream = opt_bool(body, "stream");
  if (auto* e = failed(stream)) return anthropic_error(*e);
  auto prompt = service.prepare_chat(std::move(value_of(input)));
  if (auto* e = failed(prompt)) return anthropic_error(*e);

  auto call = std::make_shared<MessagesCall>();
  call->id = new_id("msg_");
  call->model = body["model"].get<std::string>();
  call->prompt = std::move(value_of(prompt));
  call->stops = value_of(stops);
  runtime::GenerateRequest g;
  g.prompt_ids = call->prompt.ids;
  g.sampling = value_of(sampling);
  g.max_tokens = service.max_tokens(value_of(max_tokens), g.prompt_ids.size());  // 32000 is clamped, not rejected
  g.stop_strings = call->stops;
  g.turn_boundary = call->prompt.turn_boundary;
  call->prompt.cache_key = conversation_key(session_key(request, body), call->prompt.request.messages);
  g.cache_key = call->prompt.cache_key;
  g.grammar = call->prompt.grammar;
  auto gen = service.submit(std::move(g));
  if (auto* e = failed(gen)) return anthropic_error(*e);
  call->generation = std::move(value_of(gen));
  if (!value_of(stream).value_or(false)) return respond_whole(service, *call);
  return sse_response([&service, call](StreamSink& sink) { write_stream(service, *call, sink); });
}

HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& request) {
  auto body_r = parse_body(request);
  if (auto* e = failed(body_r)) return anthropic_error(*e);
  OJson& body = value_of(body_r);
  if (auto e = service.check_model(body)) return anthropic_error(*e);
  auto input = chat_input(body);
  if (auto* e = failed(input)) return anthropic_error(*e);
  auto n = service.count_chat_tokens(value_of(input));
  if (auto* e = failed(n)) return anthropic_error(*e);
  return json_response(200, dump(OJson{{"input_tokens", value_of(n)}}));
}

}  // namespace kapitsa::server::api
