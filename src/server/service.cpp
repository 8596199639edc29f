// Service (see service.h).
#include "server/service.h"

#include "base/log.h"
#include "text/chat/next_turn.h"
#include "text/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

namespace kapitsa::server {

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex);
  ++requests[fmt::format("{} {}", endpoint, status)];
}

// Forwards to the engine's Generation and stays registered with the Service while alive.
class Service::Tracked : public runtime::Generation {
 public:
  Tracked(Service* service, std::unique_ptr<runtime::Generation> inner) : service_(service), inner_(std::move(inner)) {}
  ~Tracked() override { service_->untrack(this); }
  bool next(runtime::Event& event) override { return inner_->next(event); }
  bool next_for(runtime::Event& event, std::chrono::milliseconds timeout, bool& timed_out) override {
    return inner_->next_for(event, timeout, timed_out);
  }
  void cancel() override { inner_->cancel(); }

 private:
  Service* service_;
  std::unique_ptr<runtime::Generation> inner_;
};

Service::Service(ServiceOptions options) : options_(std::move(options)) {
  if (options_.model_ids.empty()) options_.model_ids.push_back("kapitsa");
}

void Service::set_model(std::shared_ptr<runtime::Engine> engine, std::shared_ptr<const text::ChatTemplate> t,
                        runtime::SamplingParams sampling) {
  engine_ = std::move(engine);
  default_sampling_ = std::move(sampling);
  template_ = std::move(t);
  encoder_.reset();
  if (engine_ && engine_->has_tokenizer())
    encoder_ = std::make_shared<text::PromptEncoder>(std::shared_ptr<const text::Tokenizer>(engine_, &engine_->tokenizer()));
  ready_.store(engine_ != nullptr);
}

int64_t Service::context_tokens() const {
  return engine_ ? engine_->options().context_tokens : 0;
}

std::optional<ApiError> Service::check_model(const OJson& body) const {
  if (shutting_down()) return ApiError{ErrorKind::unavailable, "the server is shutting down"};
  if (!ready()) return ApiError{ErrorKind::unavailable, "the model is still loading"};
  auto it = body.find("model");
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty())
    return invalid_request("model is required (a string naming the model, see GET /v1/models)", "model");
  const std::string model = it->get<std::string>();
  if (options_.accept_any_model) return std::nullopt;
  if (std::find(options_.model_ids.begin(), options_.model_ids.end(), model) != options_.model_ids.end())
    return std::nullopt;
  return ApiError{ErrorKind::not_found,
                  fmt::format("model '{}' does not exist; this server serves '{}'", model, model_id()), "model"};
}

namespace {

ApiError too_long(size_t n, int64_t context) {
  return ApiError{ErrorKind::context_too_long,
                  fmt::format("prompt is too long: {} tokens > {} maximum (the request exceeds the available "
                              "context size of {} tokens)",
                              n, context - 1, context),
                  "messages"};
}

}  // namespace

ApiResult<PreparedPrompt> Service::prepare_chat(ChatInput input) const { return prepare(std::move(input), true); }

ApiResult<PreparedPrompt> Service::prepare(ChatInput input, bool fit_context) const {
  if (!template_) return ApiError{ErrorKind::invalid_argument, "this model has no chat template; use /v1/completions"};
  if (input.messages.empty()) return invalid_request("messages must not be empty", "messages");
  text::ChatRequest request;
  request.messages = std::move(input.messages);
  const bool with_tools = input.offer_tools && !input.tools.tools.is_null();
  request.tools = with_tools ? input.tools.tools : OJson(nullptr);
  request.kwargs = options_.template_kwargs;
  for (auto it = input.kwargs.begin(); it != input.kwargs.end(); ++it) request.kwargs[it.key()] = it.value();
  auto chat = text::render_chat_prompt(*template_, engine_->tokenizer(), std::move(request), encoder_.get());
  if (!chat.ok()) return api_error(chat.error(), "the chat template rejected the conversation: ");

  PreparedPrompt p;
  static_cast<text::ChatPrompt&>(p) = std::move(*chat);
  if (p.ids.empty()) return invalid_request("the prompt is empty", "messages");
  if (fit_context && static_cast<int64_t>(p.ids.size()) >= context_tokens()) return too_long(p.ids.size(), context_tokens());
  if (with_tools) p.custom_tools = input.tools.custom_names;
  auto grammar = constraint_grammar(input.constraint, with_tools ? input.tools.tools : OJson(nullptr), p.format.tools,
                                    p.grammar_start());
  if (auto* e = std::get_if<ApiError>(&grammar)) return *e;
  p.grammar = std::get<std::shared_ptr<const text::Grammar>>(grammar);
  if (!p.grammar) p.grammar = options_.default_grammar;
  return p;
}

ApiResult<PreparedPrompt> Service::prepare_text(const std::string& prompt) const {
  PreparedPrompt p;
  p.text = prompt;
  p.ids = engine_->tokenizer().encode(prompt);
  if (p.ids.empty()) return invalid_request("prompt must not be empty", "prompt");
  if (static_cast<int64_t>(p.ids.size()) >= context_tokens()) return too_long(p.ids.size(), context_tokens());
  p.grammar = options_.default_grammar;
  return p;
}

ApiResult<size_t> Service::count_chat_tokens(const ChatInput& input) const {
  // Counting a prompt that does not fit is still an answer (clients use it to decide to compact).
  auto p = prepare(input, /*fit_context=*/false);  // a copy: counting is rare
  if (auto* e = std::get_if<ApiError>(&p)) return *e;
  return std::get<PreparedPrompt>(p).ids.size();
}

int Service::max_tokens(std::optional<int64_t> requested, size_t prompt_tokens) const {
  const int64_t room = std::max<int64_t>(1, context_tokens() - static_cast<int64_t>(prompt_tokens));
  int64_t n = std::min(requested && *requested > 0 ? *requested : std::max<int64_t>(1, options_.max_output_tokens), room);
  return static_cast<int>(std::min<int64_t>(n, 1 << 30));
}

ApiResult<std::unique_ptr<runtime::Generation>> Service::submit(runtime::GenerateRequest request) {
  if (shutting_down()) return ApiError{ErrorKind::unavailable, "the server is shutting down"};
  // One lock from the count to the insert, so concurrent requests cannot overshoot the bound.
  std::lock_guard lock(mutex_);
  const size_t limit =
      static_cast<size_t>(engine_->options().max_sequences) + static_cast<size_t>(std::max(0, options_.max_queued));
  if (running_.size() >= limit) {
    ++metrics_.rejected_overloaded;
    return ApiError{ErrorKind::overloaded,
                    fmt::format("the server is busy: {} generations running or queued (at most {}); try again shortly",
                                running_.size(), limit)};
  }
  auto g = engine_->submit(std::move(request));
  if (!g.ok()) return api_error(g.error());
  auto tracked = std::make_unique<Tracked>(this, std::move(*g));
  running_.insert(tracked.get());
  if (shutting_down()) tracked->cancel();  // raced with shutdown(): end it at once
  return std::unique_ptr<runtime::Generation>(std::move(tracked));
}

void Service::untrack(Tracked* g) {
  std::lock_guard lock(mutex_);
  running_.erase(g);
}

void Service::record_finish(const runtime::FinishEvent& f) {
  metrics_.prompt_tokens += f.stats.prompt_tokens;
  metrics_.cached_prompt_tokens += f.stats.cached_prompt_tokens;
  metrics_.completion_tokens += f.stats.completion_tokens;
  if (f.stats.decode_tokens_per_s > 0 && f.stats.completion_tokens > 1) {
    metrics_.decode_tokens += f.stats.completion_tokens;
    metrics_.decode_micros += static_cast<int64_t>(1e6 * f.stats.completion_tokens / f.stats.decode_tokens_per_s);
  }
}

void Service::shutdown() {
  shutting_down_.store(true);
  std::lock_guard lock(mutex_);
  for (Tracked* g : running_) g->cancel();
}

TurnResult Service::stream_turn(std::unique_ptr<runtime::Generation>& generation, const PreparedPrompt& prompt,
                                bool opened, const TurnCallbacks& callbacks) {
  metrics_.streams_active++;
  TurnResult r;
  if (opened) {
    text::OutputParser output(prompt.parser);
    r = run_turn(*generation, output, callbacks, options_.keepalive);
  } else {
    r.client_gone = true;
    generation->cancel();
  }
  generation.reset();
  record_finish(r.finish);
  metrics_.streams_active--;
  if (r.client_gone) metrics_.client_disconnects++;
  preload_next_turn(prompt, r);
  return r;
}

TurnResult Service::whole_turn(std::unique_ptr<runtime::Generation>& generation, const PreparedPrompt& prompt,
                               const TurnCallbacks& callbacks) {
  text::OutputParser parser(prompt.parser);
  TurnResult r = run_turn(*generation, parser, callbacks, options_.keepalive);
  generation.reset();
  record_finish(r.finish);
  preload_next_turn(prompt, r);
  return r;
}

void Service::preload_next_turn(const PreparedPrompt& prompt, const TurnResult& r) {
  // A reply cut by its budget is history too (clients send back what they got).
  const bool ended = r.finish.reason == runtime::FinishReason::stop || r.finish.reason == runtime::FinishReason::length;
  if (!template_ || !engine_ || r.client_gone || !ended || prompt.request.messages.empty()) return;
  // The reply as a client sends it back (OpenAI chat shape), normalised like every request's messages.
  OJson reply = {{"role", "assistant"}, {"content", r.content}};
  if (!r.reasoning.empty()) reply["reasoning_content"] = r.reasoning;
  if (!r.calls.empty()) {
    OJson calls = OJson::array();
    for (const text::ToolCall& c : r.calls)
      calls.push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    reply["tool_calls"] = std::move(calls);
  }
  auto normalized = normalize_messages(OJson::array({std::move(reply)}));
  if (std::get_if<ApiError>(&normalized)) return;
  auto text = text::render_next_turn_history(*template_, prompt.request, std::get<OJson>(normalized)[0]);
  if (!text.ok()) {
    log::debug("no preload of the next turn: {}", text.error().message);
    return;
  }
  std::vector<int32_t> ids = encoder_ ? encoder_->encode(*text).ids : engine_->tokenizer().encode(*text);
  if (Status s = engine_->preload(std::move(ids), prompt.cache_key); !s.ok())
    log::debug("no preload of the next turn: {}", s.error().message);
}

}  // namespace kapitsa::server
