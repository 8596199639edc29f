// POST /v1/responses (OpenAI Responses, the only wire Codex speaks), streamed and not. Input items
// (messages incl. developer, reasoning, function_call / custom_tool_call and their outputs) become a
// chat conversation; output is a list of items: reasoning, message, function_call, custom_tool_call
// (for tools declared "custom", e.g. apply_patch: the raw text goes in `input`). Stream:
// response.created, response.in_progress (sent at once, before the prefill), per item
// output_item.added → deltas → output_item.done (authoritative for Codex), then response.completed
// with usage — also on length limits (status "incomplete"); engine errors end in response.failed.
#include "server/api/api.h"
#include "server/api/common.h"
#include "server/turn.h"

#include <fmt/format.h>

namespace kapitsa::server::api {
namespace {

std::string output_text(const OJson& output) {
  return output.is_string() ? output.get<std::string>() : content_text(output);
}

// Responses input → OpenAI-chat-shaped messages (normalised afterwards).
ApiResult<OJson> responses_to_chat_messages(const OJson& body) {
  OJson out = OJson::array();
  if (auto it = body.find("instructions"); it != body.end() && it->is_string() && !it->get<std::string>().empty())
    out.push_back({{"role", "system"}, {"content", *it}});
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return invalid_request("input is required", "input");
  if (input->is_string()) {
    out.push_back({{"role", "user"}, {"content", *input}});
    return out;
  }
  if (!input->is_array()) return invalid_request("input must be a string or an array of items", "input");
  std::string pending_reasoning;
  auto assistant = [&]() -> OJson& {
    // Calls continue the assistant turn they belong to; otherwise they open one.
    if (out.empty() || out.back()["role"] != "assistant") {
      out.push_back({{"role", "assistant"}, {"content", ""}});
    }
    OJson& m = out.back();
    if (!pending_reasoning.empty()) {
      m["reasoning_content"] = pending_reasoning;
      pending_reasoning.clear();
    }
    return m;
  };
  auto add_call = [&](const std::string& call_id, const std::string& name, OJson arguments) {
    OJson& m = assistant();
    if (!m.contains("tool_calls")) m["tool_calls"] = OJson::array();
    m["tool_calls"].push_back({{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(arguments)}}}});
  };
  for (size_t i = 0; i < input->size(); ++i) {
    const OJson& item = (*input)[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) return invalid_request(where + " must be an object", where);
    std::string type = item.value("type", "");
    if (type.empty() && item.contains("role")) type = "message";
    if (type == "message") {
      const std::string role = item.value("role", "");
      const OJson content = item.value("content", OJson(""));
      if (content.is_array())
        if (auto e = check_text_parts(content, where + ".content")) return *e;
      if (role == "assistant") {
        // A new assistant message after calls starts a new turn only if the last one has calls.
        if (!out.empty() && out.back()["role"] == "assistant" && !out.back().contains("tool_calls")) {
          OJson& m = out.back();
          m["content"] = m["content"].get<std::string>() + content_text(content);
        } else {
          out.push_back({{"role", "assistant"}, {"content", content_text(content)}});
        }
        if (!pending_reasoning.empty()) {
          out.back()["reasoning_content"] = pending_reasoning;
          pending_reasoning.clear();
        }
      } else {
        out.push_back({{"role", role}, {"content", content.is_string() ? content : OJson(content_text(content))}});
      }
    } else if (type == "reasoning") {
      std::string text;
      for (const char* key : {"content", "summary"}) {
        if (!text.empty()) break;
        if (auto parts = item.find(key); parts != item.end() && parts->is_array())
          for (const auto& p : *parts)
            if (p.is_object()) text += p.value("text", "");
      }
      pending_reasoning += text;
    } else if (type == "function_call") {
      add_call(item.value("call_id", ""), item.value("name", ""), item.value("arguments", OJson("{}")));
    } else if (type == "custom_tool_call") {
      add_call(item.value("call_id", ""), item.value("name", ""), OJson{{kCustomToolArgument, item.value("input", "")}});
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      out.push_back({{"role", "tool"}, {"tool_call_id", item.value("call_id", "")}, {"content", output_text(item.value("output", OJson("")))}});
    }
    // Other items (web_search_call, item_reference, …) carry nothing the model can render.
  }
  return out;
}

struct ResponsesCall {
  std::string id, model;
  int64_t created = 0;
  OJson request_echo;  // parameters echoed in the response object
  PreparedPrompt prompt;
  std::unique_ptr<runtime::Generation> generation;
};

OJson response_object(const ResponsesCall& call, const char* status, OJson output, OJson usage) {
  OJson r = {{"id", call.id},       {"object", "response"}, {"created_at", call.created}, {"status", status},
             {"error", nullptr},    {"incomplete_details", nullptr}, {"model", call.model},
             {"output", std::move(output)}, {"usage", std::move(usage)}};
  for (auto it = call.request_echo.begin(); it != call.request_echo.end(); ++it) r[it.key()] = it.value();
  return r;
}

OJson responses_usage_json(const TurnResult& r, size_t prompt_ids, int reasoning_tokens) {
  const auto& s = r.finish.stats;
  const int prompt = s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int>(prompt_ids);
  return {{"input_tokens", prompt},
          {"input_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}},
          {"output_tokens", s.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", prompt + s.completion_tokens}};
}

// The output item for a parsed tool call: custom_tool_call (raw text input) for custom tools.
OJson call_item(const ResponsesCall& call, const text::ToolCall& tc, const char* status) {
  if (call.prompt.custom_tools.count(tc.name)) {
    OJson args = OJson::parse(tc.arguments, nullptr, false);
    std::string input = tc.arguments;
    if (args.is_object()) {
      if (auto it = args.find(kCustomToolArgument); it != args.end() && it->is_string()) input = it->get<std::string>();
      else if (args.size() == 1 && args.begin()->is_string()) input = args.begin()->get<std::string>();
    }
    return {{"id", new_id("ctc_")}, {"type", "custom_tool_call"}, {"status", status},
            {"call_id", new_id("call_")}, {"name", tc.name}, {"input", input}};
  }
  return {{"id", new_id("fc_")}, {"type", "function_call"}, {"status", status},
          {"call_id", new_id("call_")}, {"name", tc.name}, {"arguments", tc.arguments}};
}

// Builds output items from parse events; emits stream events through `emit` (empty for non-stream).
class ItemBuilder {
 public:
  using Emit = std::function<bool(const char*, OJson)>;
  ItemBuilder(const ResponsesCall& call, Emit emit) : call_(call), emit_(std::move(emit)) {}

  bool on(const text::ParseEvent& e) {
    switch (e.kind) {
      case text::ParseEvent::Kind::reasoning:
        if (open_ != Open::reasoning) {
          if (!close()) return false;
          open_ = Open::reasoning;
          text_.clear();
          item_id_ = new_id("rs_");
          if (!send("response.output_item.added",
                    {{"output_index", output_.size()},
                     {"item", {{"id", item_id_}, {"type", "reasoning"}, {"summary", OJson::array()}, {"content", OJson::array()}}}}))
            return false;
          if (!send("response.content_part.added", {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0},
                                                    {"part", {{"type", "reasoning_text"}, {"text", ""}}}}))
            return false;
        }
        text_ += e.text;
        return send("response.reasoning_text.delta",
                    {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", e.text}});
      case text::ParseEvent::Kind::content:
        if (open_ != Open::message) {
          if (!close()) return false;
          open_ = Open::message;
          text_.clear();
          item_id_ = new_id("msg_");
          if (!send("response.output_item.added",
                    {{"output_index", output_.size()},
                     {"item", {{"id", item_id_}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", OJson::array()}}}}))
            return false;
          if (!send("response.content_part.added",
                    {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0},
                     {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", OJson::array()}, {"logprobs", OJson::array()}}}}))
            return false;
        }
        text_ += e.text;
        return send("response.output_text.delta", {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0},
                                                   {"delta", e.text}, {"logprobs", OJson::array()}});
      case text::ParseEvent::Kind::tool_call: {
        if (!close()) return false;
        OJson item = call_item(call_, e.call, "in_progress");
        const size_t index = output_.size();
        const std::string id = item["id"];
        const bool custom = item["type"] == "custom_tool_call";
        OJson added = item;
        added[custom ? "input" : "arguments"] = "";
        if (!send("response.output_item.added", {{"output_index", index}, {"item", added}})) return false;
        const std::string payload = item[custom ? "input" : "arguments"];
        if (custom) {
          if (!send("response.custom_tool_call_input.delta", {{"item_id", id}, {"output_index", index}, {"delta", payload}})) return false;
          if (!send("response.custom_tool_call_input.done", {{"item_id", id}, {"output_index", index}, {"input", payload}})) return false;
        } else {
          if (!send("response.function_call_arguments.delta", {{"item_id", id}, {"output_index", index}, {"delta", payload}})) return false;
          if (!send("response.function_call_arguments.done",
                    {{"item_id", id}, {"output_index", index}, {"name", e.call.name}, {"arguments", payload}}))
            return false;
        }
        item["status"] = "completed";
        output_.push_back(item);
        return send("response.output_item.done", {{"output_index", index}, {"item", std::move(item)}});
      }
      case text::ParseEvent::Kind::warning: return true;
    }
    return true;
  }

  // Ends the open reasoning / message item (its output_item.done is what Codex keeps).
  bool close() {
    const size_t index = output_.size();
    if (open_ == Open::reasoning) {
      open_ = Open::none;
      OJson part = {{"type", "reasoning_text"}, {"text", text_}};
      OJson item = {{"id", item_id_}, {"type", "reasoning"}, {"summary", OJson::array()}, {"content", OJson::array({part})}};
      output_.push_back(item);
      return send("response.reasoning_text.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}}) &&
             send("response.content_part.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}}) &&
             send("response.output_item.done", {{"output_index", index}, {"item", item}});
    }
    if (open_ == Open::message) {
      open_ = Open::none;
      OJson part = {{"type", "output_text"}, {"text", text_}, {"annotations", OJson::array()}, {"logprobs", OJson::array()}};
      OJson item = {{"id", item_id_}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"}, {"content", OJson::array({part})}};
      output_.push_back(item);
      return send("response.output_text.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0},
                                                {"text", text_}, {"logprobs", OJson::array()}}) &&
             send("response.content_part.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}}) &&
             send("response.output_item.done", {{"output_index", index}, {"item", item}});
    }
    return true;
  }

  bool send(const char* type, OJson data) { return !emit_ || emit_(type, std::move(data)); }
  const OJson& output() const { return output_; }
  bool started() const { return open_ != Open::none || !output_.empty(); }

 private:
  enum class Open { none, reasoning, message };
  const ResponsesCall& call_;
  Emit emit_;
  Open open_ = Open::none;
  std::string item_id_, text_;
  OJson output_ = OJson::array();
};

void finish_response(const TurnResult& r, int reasoning_tokens, const ResponsesCall& call, const OJson& output,
                     OJson& response, const char*& event) {
  const StopKind kind = stop_kind(r, {});
  event = "response.completed";
  const char* status = "completed";
  if (kind == StopKind::length) status = "incomplete";
  if (kind == StopKind::error) status = "failed", event = "response.failed";
  response = response_object(call, status, output, responses_usage_json(r, call.prompt.ids.size(), reasoning_tokens));
  if (kind == StopKind::length) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (kind == StopKind::error) response["error"] = {{"code", "server_error"}, {"message", "generation failed: " + r.finish.error}};
}

void write_stream(Service& service, ResponsesCall& call, StreamSink& sink) {
  int64_t seq = 0;
  auto emit = [&](const char* type, OJson data) {
    OJson d = {{"type", type}};
    for (auto it = data.begin(); it != data.end(); ++it) d[it.key()] = it.value();
    d["sequence_number"] = seq++;
    return sink.write(sse_frame(type, dump(d)));
  };
  ItemBuilder items(call, emit);
  ReasoningCounter reasoning{call.prompt.parser.starts_in_reasoning};
  TurnCallbacks cb;
  cb.on_token = [&](const runtime::TokenEvent& t) { reasoning.add(t.text); };
  cb.on_event = [&](const text::ParseEvent& e) { return items.on(e); };
  OJson initial = response_object(call, "in_progress", OJson::array(), nullptr);
  // Codex's idle timeout counts events, and SSE comments are none: during a long prefill (nothing
  // output yet) repeat response.in_progress; once items exist, a comment (a lifecycle event would
  // replace the SDK's accumulated snapshot).
  cb.on_idle = [&] {
    return items.started() ? sink.write(": keep-alive\n\n") : emit("response.in_progress", {{"response", initial}});
  };

  const bool opened = emit("response.created", {{"response", initial}}) && emit("response.in_progress", {{"response", initial}});
  const TurnResult r = service.stream_turn(call.generation, call.prompt, opened, cb);
  if (r.client_gone) return;
  if (!items.close()) return;
  OJson response;
  const char* event = nullptr;
  finish_response(r, reasoning.tokens, call, items.output(), response, event);
  emit(event, {{"response", response}});
}

}  // namespace

HttpResponse openai_responses(Service& service, const HttpRequest& request) {
  auto body_r = parse_body(request);
  if (auto* e = failed(body_r)) return openai_error(*e);
  OJson& body = value_of(body_r);
  if (auto e = service.check_model(body)) return openai_error(*e);
  if (auto it = body.find("previous_response_id"); it != body.end() && !it->is_null())
    return openai_error(invalid_request("previous_response_id is not supported: responses are not stored; send the "
                                        "whole conversation in input", "previous_response_id"));
  ChatInput input;
  auto raw = responses_to_chat_messages(body);
  if (auto* e = failed(raw)) return openai_error(*e);
  auto msgs = normalize_messages(std::move(value_of(raw)));
  if (auto* e = failed(msgs)) return openai_error(*e);
  input.messages = std::move(value_of(msgs));
  auto tools = normalize_tools(body.value("tools", OJson(nullptr)), "tools");
  if (auto* e = failed(tools)) return openai_error(*e);
  input.tools = std::move(value_of(tools));
  if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_string() && *tc == "none") input.offer_tools = false;
  auto constraint = responses_constraint(body);
  if (auto* e = failed(constraint)) return openai_error(*e);
  input.constraint = value_of(constraint);
  input.kwargs = thinking_kwargs(body);
  auto sampling = sampling_params(body, service.default_sampling());
  if (auto* e = failed(sampling)) return openai_error(*e);
  auto max_out = opt_token_budget(body, "max_output_tokens");
  if (auto* e = failed(max_out)) return openai_error(*e);
  auto stream = opt_bool(body, "stream");
  if (auto* e = failed(stream)) return openai_error(*e);
  auto prompt = service.prepare_chat(std::move(input));
  if (auto* e = failed(prompt)) return openai_error(*e);

  auto call = std::make_shared<ResponsesCall>();
  call->id = new_id("resp_");
  call->model = body["model"].get<std::string>();
  call->created = unix_now();
  call->prompt = std::move(value_of(prompt));
  call->request_echo = {{"instructions", body.value("instructions", OJson(nullptr))},
                        {"max_output_tokens", body.value("max_output_tokens", OJson(nullptr))},
                        {"parallel_tool_calls", body.value("parallel_tool_calls", true)},
                        {"previous_response_id", nullptr},
                        {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                        {"store", false},
                        {"temperature", body.value("temperature", OJson(1.0))},
                        {"text", body.contains("text") && body["text"].is_object()
                                     ? body["text"]
                                     : OJson({{"format", {{"type", "text"}}}})},
                        {"tool_choice", body.value("tool_choice", OJson("auto"))},
                        {"tools", body.value("tools", OJson::array())},
                        {"top_p", body.value("top_p", OJson(1.0))},
                        {"truncation", "disabled"},
                        {"metadata", body.value("metadata", OJson::object())}};
  runtime::GenerateRequest g;
  g.prompt_ids = call->prompt.ids;
  g.sampling = value_of(sampling);
  g.max_tokens = service.max_tokens(value_of(max_out), g.prompt_ids.size());
  g.turn_boundary = call->prompt.turn_boundary;
  call->prompt.cache_key = conversation_key(session_key(request, body), call->prompt.request.messages);
  g.cache_key = call->prompt.cache_key;
  g.grammar = call->prompt.grammar;
  auto gen = service.submit(std::move(g));
  if (auto* e = failed(gen)) return openai_error(*e);
  call->generation = std::move(value_of(gen));

  if (value_of(stream).value_or(false))
    return sse_response([&service, call](StreamSink& sink) { write_stream(service, *call, sink); });

  ItemBuilder items(*call, nullptr);
  ReasoningCounter reasoning{call->prompt.parser.starts_in_reasoning};
  TurnCallbacks cb;
  cb.on_token = [&](const runtime::TokenEvent& t) { reasoning.add(t.text); };
  cb.on_event = [&](const text::ParseEvent& e) { return items.on(e); };
  TurnResult r = service.whole_turn(call->generation, call->prompt, cb);
  items.close();
  OJson response;
  const char* event = nullptr;
  finish_response(r, reasoning.tokens, *call, items.output(), response, event);
  if (response["status"] == "failed") return openai_error(ApiError{ErrorKind::internal, response["error"]["message"]});
  return json_response(200, dump(response));
}

}  // namespace kapitsa::server::api
