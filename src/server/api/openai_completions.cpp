// POST /v1/completions (OpenAI legacy completions): a raw prompt string (no chat template), streamed
// as text_completion chunks ending with a finish_reason chunk, an optional usage chunk and [DONE].
// No output parsing: the text is the model's, verbatim. logprobs (an integer) gives the legacy shape.
#include "server/api/api.h"
#include "server/api/common.h"
#include "server/turn.h"
#include "text/tokenizer/tokenizer.h"

namespace kapitsa::server::api {
namespace {

struct CompletionCall {
  std::string id, model;
  int64_t created = 0;
  size_t prompt_tokens = 0;
  bool include_usage = false;
  int logprobs = -1;
  std::vector<std::string> stops;
  std::unique_ptr<runtime::Generation> generation;
};

const char* legacy_finish_reason(StopKind k) { return k == StopKind::length ? "length" : "stop"; }

OJson legacy_usage_json(const TurnResult& r, size_t prompt_ids) {
  const auto& s = r.finish.stats;
  const int prompt = s.prompt_tokens > 0 ? s.prompt_tokens : static_cast<int>(prompt_ids);
  return {{"prompt_tokens", prompt},
          {"completion_tokens", s.completion_tokens},
          {"total_tokens", prompt + s.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}}};
}

// Legacy logprobs: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
struct LegacyLogprobs {
  OJson tokens = OJson::array(), token_logprobs = OJson::array(), top = OJson::array(), offsets = OJson::array();
  size_t offset = 0;
  void add(const text::Tokenizer& tok, const runtime::TokenEvent& t) {
    const int32_t id[1] = {t.id};
    std::string s = tok.decode(id);
    tokens.push_back(s);
    token_logprobs.push_back(t.logprob);
    OJson alt = OJson::object();
    for (const auto& a : t.top) {
      const int32_t aid[1] = {a.id};
      alt[tok.decode(aid)] = a.logprob;
    }
    top.push_back(std::move(alt));
    offsets.push_back(offset);
    offset += s.size();
  }
  OJson take() {
    OJson j = {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
               {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
    tokens = token_logprobs = top = offsets = OJson::array();
    return j;
  }
};

}  // namespace

HttpResponse openai_completions(Service& service, const HttpRequest& request) {
  auto body_r = parse_body(request);
  if (auto* e = failed(body_r)) return openai_error(*e);
  OJson& body = value_of(body_r);
  if (auto e = service.check_model(body)) return openai_error(*e);
  auto p = body.find("prompt");
  if (p == body.end()) return openai_error(invalid_request("prompt is required", "prompt"));
  std::string prompt_text;
  if (p->is_string()) {
    prompt_text = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    prompt_text = (*p)[0].get<std::string>();
  } else {
    return openai_error(invalid_request("prompt must be a string (batched prompts are not supported)", "prompt"));
  }
  auto n = opt_int(body, "n");
  if (auto* e = failed(n)) return openai_error(*e);
  if (value_of(n) && *value_of(n) != 1) return openai_error(invalid_request("n other than 1 is not supported", "n"));
  auto sampling = sampling_params(body, service.default_sampling());
  if (auto* e = failed(sampling)) return openai_error(*e);
  auto stops = stop_strings(body, "stop");
  if (auto* e = failed(stops)) return openai_error(*e);
  auto max_t = opt_token_budget(body, "max_tokens");
  if (auto* e = failed(max_t)) return openai_error(*e);
  auto logprobs = opt_int(body, "logprobs");
  if (auto* e = failed(logprobs)) return openai_error(*e);
  if (value_of(logprobs) && (*value_of(logprobs) < 0 || *value_of(logprobs) > 5))
    return openai_error(invalid_request("logprobs must be between 0 and 5", "logprobs"));
  auto stream = opt_bool(body, "stream");
  if (auto* e = failed(stream)) return openai_error(*e);
  auto prompt = service.prepare_text(prompt_text);
  if (auto* e = failed(prompt)) return openai_error(*e);

  auto call = std::make_shared<CompletionCall>();
  call->id = new_id("cmpl-");
  call->model = body["model"].get<std::string>();
  call->created = unix_now();
  call->prompt_tokens = value_of(prompt).ids.size();
  call->stops = value_of(stops);
  call->logprobs = value_of(logprobs) ? static_cast<int>(*value_of(logprobs)) : -1;
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
    call->include_usage = so->value("include_usage", false);
  runtime::GenerateRequest g;
  g.prompt_ids = std::move(value_of(prompt).ids);
  g.sampling = value_of(sampling);
  g.max_tokens = service.max_tokens(value_of(max_t) ? value_of(max_t) : std::optional<int64_t>(16), g.prompt_ids.size());
  g.stop_strings = call->stops;
  g.top_logprobs = call->logprobs;
  g.cache_key = session_key(request, body);
  g.grammar = value_of(prompt).grammar;
  auto gen = service.submit(std::move(g));
  if (auto* e = failed(gen)) return openai_error(*e);
  call->generation = std::move(value_of(gen));
  text::OutputParser plain(text::ParserOptions{});  // passthrough: no reasoning, no tools

  auto chunk_json = [call](std::string text, OJson finish, OJson logprobs) {
    return OJson{{"id", call->id}, {"object", "text_completion"}, {"created", call->created}, {"model", call->model},
                 {"choices", OJson::array({{{"index", 0}, {"text", std::move(text)}, {"logprobs", std::move(logprobs)},
                                            {"finish_reason", std::move(finish)}}})}};
  };

  if (!value_of(stream).value_or(false)) {
    std::string text;
    LegacyLogprobs lp;
    const auto& tok = service.engine().tokenizer();
    TurnCallbacks cb;
    cb.on_token = [&](const runtime::TokenEvent& t) { if (call->logprobs >= 0) lp.add(tok, t); };
    cb.on_event = [&](const text::ParseEvent& e) { text += e.text; return true; };
    TurnResult r = run_turn(*call->generation, plain, cb, service.options().keepalive);
    call->generation.reset();
    service.record_finish(r.finish);
    const StopKind kind = stop_kind(r, call->stops);
    if (kind == StopKind::error) return openai_error(ApiError{ErrorKind::internal, "generation failed: " + r.finish.error});
    OJson out = chunk_json(text, legacy_finish_reason(kind), call->logprobs >= 0 ? lp.take() : OJson(nullptr));
    out["usage"] = legacy_usage_json(r, call->prompt_tokens);
    return json_response(200, dump(out));
  }

  return sse_response([&service, call, chunk_json](StreamSink& sink) {
    LegacyLogprobs lp;
    const auto& tok = service.engine().tokenizer();
    text::OutputParser parser(text::ParserOptions{});
    TurnCallbacks cb;
    cb.on_token = [&](const runtime::TokenEvent& t) { if (call->logprobs >= 0) lp.add(tok, t); };
    cb.on_event = [&](const text::ParseEvent& e) {
      return sink.write(sse_frame("", dump(chunk_json(e.text, nullptr, call->logprobs >= 0 ? lp.take() : OJson(nullptr)))));
    };
    cb.on_idle = [&] { return sink.write(": keep-alive\n\n"); };
    service.metrics().streams_active++;
    TurnResult r = run_turn(*call->generation, parser, cb, service.options().keepalive);
    call->generation.reset();
    service.record_finish(r.finish);
    service.metrics().streams_active--;
    if (r.client_gone) {
      service.metrics().client_disconnects++;
      return;
    }
    const StopKind kind = stop_kind(r, call->stops);
    if (!sink.write(sse_frame("", dump(chunk_json("", legacy_finish_reason(kind), nullptr))))) return;
    if (call->include_usage) {
      OJson u = chunk_json("", nullptr, nullptr);
      u["choices"] = OJson::array();
      u["usage"] = legacy_usage_json(r, call->prompt_tokens);
      if (!sink.write(sse_frame("", dump(u)))) return;
    }
    if (kind == StopKind::error &&
        !sink.write(sse_frame("", openai_error_json(ApiError{ErrorKind::internal, "generation failed: " + r.finish.error}))))
      return;
    sink.write("data: [DONE]\n\n");
  });
}

}  // namespace kapitsa::server::api
