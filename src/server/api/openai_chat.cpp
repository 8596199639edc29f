// POST /v1/chat/completions (OpenAI Chat Completions), streamed and not. Stream: a first chunk with
// role "assistant", content / reasoning_content deltas, tool calls as delta.tool_calls (a header
// fragment {index, id, type, function.name, arguments:""} then the arguments), a final chunk that
// always carries finish_reason (stop | length | tool_calls — opencode loops forever without one), the
// usage chunk (choices: [], with llama.cpp's `timings`) when stream_options.include_usage, then
// [DONE]. Keep-alive: SSE comments.
#include "server/api/api.h"
#include "server/api/common.h"
#include "server/turn.h"
#include "text/tokenizer/tokenizer.h"

namespace kapitsa::server::api {
namespace {

struct ChatCall {
  std::string id;
  std::string model;
  int64_t created = 0;
  PreparedPrompt prompt;
  std::vector<std::string> stops;
  bool include_usage = false;
  bool logprobs = false;
  std::unique_ptr<runtime::Generation> generation;
};

const char* finish_reason(StopKind k) {
  switch (k) {
    case StopKind::length: return "length";
    case StopKind::tool_calls: return "tool_calls";
    default: return "stop";
  }
}

OJson usage_json(const TurnResult& r, size_t prompt_ids, int reasoning_tokens) {
  const auto& s = r.finish.stats;
  const int prompt = s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int>(prompt_ids);
  return OJson{{"prompt_tokens", prompt},
               {"completion_tokens", s.completion_tokens},
               {"total_tokens", prompt + s.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}},
               // OpenAI's predicted-outputs fields, here for Kapitsa's own guesses (speculative decoding).
               {"completion_tokens_details",
                {{"reasoning_tokens", reasoning_tokens},
                 {"accepted_prediction_tokens", s.draft_tokens_accepted},
                 {"rejected_prediction_tokens", s.draft_tokens - s.draft_tokens_accepted}}}};
}

// The server's own clock for the turn, in llama.cpp's `timings` names (its web UI and scripts read
// them): prompt_ms is submit → first token (queueing and prompt processing), predicted_per_second the
// decode speed after the first token. The chat page shows them (src/server/page/app.js).
OJson timings_json(const TurnResult& r) {
  const auto& s = r.finish.stats;
  return OJson{{"cache_n", s.cached_prompt_tokens},
               {"prompt_n", std::max(0, s.prompt_tokens - s.cached_prompt_tokens)},
               {"prompt_ms", s.time_to_first_token_s * 1000.0},
               {"predicted_n", s.completion_tokens},
               {"predicted_per_second", s.decode_tokens_per_s}};
}

ApiResult<std::shared_ptr<ChatCall>> start(Service& service, const HttpRequest& request, bool& stream) {
  auto body_r = parse_body(request);
  if (auto* e = failed(body_r)) return *e;
  OJson& body = value_of(body_r);
  if (auto e = service.check_model(body)) return *e;
  auto messages_it = body.find("messages");
  if (messages_it == body.end()) return invalid_request("messages is required", "messages");
  auto n = opt_int(body, "n");
  if (auto* e = failed(n)) return *e;
  if (value_of(n) && *value_of(n) != 1) return invalid_request("n other than 1 is not supported", "n");

  ChatInput input;
  auto msgs = normalize_messages(std::move(*messages_it));
  if (auto* e = failed(msgs)) return *e;
  input.messages = std::move(value_of(msgs));
  auto tools = normalize_tools(body.value("tools", OJson(nullptr)), "tools");
  if (auto* e = failed(tools)) return *e;
  input.tools = std::move(value_of(tools));
  if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_string() && *tc == "none") input.offer_tools = false;
  auto constraint = openai_chat_constraint(body);
  if (auto* e = failed(constraint)) return *e;
  input.constraint = value_of(constraint);
  input.kwargs = thinking_kwargs(body);

  auto sampling = sampling_params(body, service.default_sampling());
  if (auto* e = failed(sampling)) return *e;
  auto stops = stop_strings(body, "stop");
  if (auto* e = failed(stops)) return *e;
  auto max_c = opt_token_budget(body, "max_completion_tokens");
  if (auto* e = failed(max_c)) return *e;
  auto max_t = opt_token_budget(body, "max_tokens");
  if (auto* e = failed(max_t)) return *e;
  auto logprobs = opt_bool(body, "logprobs");
  if (auto* e = failed(logprobs)) return *e;
  auto top = opt_int(body, "top_logprobs");
  if (auto* e = failed(top)) return *e;
  if (value_of(top) && (*value_of(top) < 0 || *value_of(top) > 20))
    return invalid_request("top_logprobs must be between 0 and 20", "top_logprobs");
  auto stream_r = opt_bool(body, "stream");
  if (auto* e = failed(stream_r)) return *e;
  stream = value_of(stream_r).value_or(false);

  auto call = std::make_shared<ChatCall>();
  call->id = new_id("chatcmpl-");
  call->model = body["model"].get<std::string>();
  call->created = unix_now();
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
    call->include_usage = so->value("include_usage", false);
  call->logprobs = value_of(logprobs).value_or(false);

  auto prompt = service.prepare_chat(std::move(input));
  if (auto* e = failed(prompt)) return *e;
  call->prompt = std::move(value_of(prompt));
  call->stops = value_of(stops);

  runtime::GenerateRequest g;
  g.prompt_ids = call->prompt.ids;
  g.sampling = value_of(sampling);
  g.max_tokens = service.max_tokens(value_of(max_c) ? value_of(max_c) : value_of(max_t), g.prompt_ids.size());
  g.stop_strings = call->stops;
  g.top_logprobs = call->logprobs ? static_cast<int>(value_of(top).value_or(0)) : -1;
  g.turn_boundary = call->prompt.turn_boundary;
  call->prompt.cache_key = conversation_key(session_key(request, body), call->prompt.request.messages);
  g.cache_key = call->prompt.cache_key;
  g.grammar = call->prompt.grammar;
  auto gen = service.submit(std::move(g));
  if (auto* e = failed(gen)) return *e;
  call->generation = std::move(value_of(gen));
  return call;
}

void write_stream(Service& service, ChatCall& call, StreamSink& sink) {
  const auto& tokenizer = service.engine().tokenizer();
  auto chunk = [&](OJson delta, OJson finish, OJson logprobs) {
    OJson choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                    {"finish_reason", std::move(finish)}};
    OJson c = {{"id", call.id},           {"object", "chat.completion.chunk"}, {"created", call.created},
               {"model", call.model},     {"system_fingerprint", "kapitsa"},   {"choices", OJson::array({choice})}};
    if (call.include_usage) c["usage"] = nullptr;
    return sink.write(sse_frame("", dump(c)));
  };
  OJson pending_logprobs = OJson::array();
  auto take_logprobs = [&]() -> OJson {
    if (!call.logprobs) return nullptr;
    OJson lp = {{"content", std::move(pending_logprobs)}};
    pending_logprobs = OJson::array();
    return lp;
  };
  ReasoningCounter reasoning{call.prompt.parser.starts_in_reasoning};
  int tool_index = 0;

  TurnCallbacks cb;
  cb.on_token = [&](const runtime::TokenEvent& t) {
    reasoning.add(t.text);
    if (call.logprobs) pending_logprobs.push_back(logprob_entry(tokenizer, t));
  };
  cb.on_event = [&](const text::ParseEvent& e) {
    switch (e.kind) {
      case text::ParseEvent::Kind::content:
        return chunk({{"content", e.text}}, nullptr, take_logprobs());
      case text::ParseEvent::Kind::reasoning:
        return chunk({{"reasoning_content", e.text}}, nullptr, take_logprobs());
      case text::ParseEvent::Kind::tool_call: {
        const int index = tool_index++;
        OJson head = {{"index", index},
                      {"id", new_id("call_")},
                      {"type", "function"},
                      {"function", {{"name", e.call.name}, {"arguments", ""}}}};
        if (!chunk({{"tool_calls", OJson::array({head})}}, nullptr, nullptr)) return false;
        OJson args = {{"index", index}, {"function", {{"arguments", e.call.arguments}}}};
        return chunk({{"tool_calls", OJson::array({args})}}, nullptr, take_logprobs());
      }
      case text::ParseEvent::Kind::warning: return true;
    }
    return true;
  };
  cb.on_idle = [&] { return sink.write(": keep-alive\n\n"); };

  const bool opened = chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
  const TurnResult r = service.stream_turn(call.generation, call.prompt, opened, cb);
  if (r.client_gone) return;
  const StopKind kind = stop_kind(r, call.stops);
  if (!chunk(OJson::object(), finish_reason(kind), call.logprobs && !pending_logprobs.empty() ? take_logprobs() : OJson(nullptr)))
    return;
  if (call.include_usage) {
    OJson u = {{"id", call.id},       {"object", "chat.completion.chunk"}, {"created", call.created},
               {"model", call.model}, {"system_fingerprint", "kapitsa"},   {"choices", OJson::array()},
               {"usage", usage_json(r, call.prompt.ids.size(), reasoning.tokens)}};
    u["timings"] = timings_json(r);
    if (!sink.write(sse_frame("", dump(u)))) return;
  }
  if (kind == StopKind::error) {
    ApiError e{ErrorKind::internal, "generation failed: " + r.finish.error};
    if (!sink.write(sse_frame("", openai_error_json(e)))) return;
  }
  sink.write("data: [DONE]\n\n");
}

HttpResponse respond_whole(Service& service, ChatCall& call) {
  const auto& tokenizer = service.engine().tokenizer();
  std::string content, reasoning;
  OJson calls = OJson::array();
  OJson logprobs = OJson::array();
  ReasoningCounter counter{call.prompt.parser.starts_in_reasoning};
  TurnCallbacks cb;
  cb.on_token = [&](const runtime::TokenEvent& t) {
    counter.add(t.text);
    if (call.logprobs) logprobs.push_back(logprob_entry(tokenizer, t));
  };
  cb.on_event = [&](const text::ParseEvent& e) {
    if (e.kind == text::ParseEvent::Kind::content) content += e.text;
    if (e.kind == text::ParseEvent::Kind::reasoning) reasoning += e.text;
    if (e.kind == text::ParseEvent::Kind::tool_call) {
      calls.push_back({{"id", new_id("call_")},
                       {"type", "function"},
                       {"function", {{"name", e.call.name}, {"arguments", e.call.arguments}}}});
    }
    return true;
  };
  TurnResult r = service.whole_turn(call.generation, call.prompt, cb);
  const StopKind kind = stop_kind(r, call.stops);
  if (kind == StopKind::error) return openai_error(ApiError{ErrorKind::internal, "generation failed: " + r.finish.error});
  OJson message = {{"role", "assistant"}, {"content", content.empty() && !calls.empty() ? OJson(nullptr) : OJson(content)}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  OJson choice = {{"index", 0},
                  {"message", std::move(message)},
                  {"logprobs", call.logprobs ? OJson{{"content", std::move(logprobs)}} : OJson(nullptr)},
                  {"finish_reason", finish_reason(kind)}};
  OJson out = {{"id", call.id},
               {"object", "chat.completion"},
               {"created", call.created},
               {"model", call.model},
               {"system_fingerprint", "kapitsa"},
               {"choices", OJson::array({std::move(choice)})},
               {"usage", usage_json(r, call.prompt.ids.size(), counter.tokens)}};
  return json_response(200, dump(out));
}

}  // namespace

HttpResponse openai_error(const ApiError& e) { return with_retry_after(e, json_response(e.status(), openai_error_json(e))); }

HttpResponse openai_chat(Service& service, const HttpRequest& request) {
  bool stream = false;
  auto call_r = start(service, request, stream);
  if (auto* e = failed(call_r)) return openai_error(*e);
  std::shared_ptr<ChatCall> call = value_of(call_r);
  if (!stream) return respond_whole(service, *call);
  return sse_response([&service, call](StreamSink& sink) { write_stream(service, *call, sink); });
}

}  // namespace kapitsa::server::api
