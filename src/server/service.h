// Service: what every endpoint shares — the engine (absent while the model loads), the chat template,
// the served model ids, prompt preparation (normalised conversation → rendered prompt → token ids,
// with the turn boundary and the output-parser setup), generation tracking (so shutdown can end every
// stream cleanly) and the counters behind /metrics. Thread-safe; endpoints hold it by reference.
// Not HTTP: no sockets, no wire formats (those are transport.cpp and api/).
#pragma once

#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/constraint.h"
#include "server/conversation.h"
#include "server/turn.h"
#include "text/chat/chat_prompt.h"
#include "text/parse/output_parser.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kapitsa::server {

struct ServiceOptions {
  std::vector<std::string> model_ids = {"kapitsa"};  // the first is what /v1/models lists first
  bool accept_any_model = false;                      // serve any requested model id with the one model
  std::chrono::milliseconds keepalive{5000};          // SSE keep-alive (ping) while nothing is produced
  OJson template_kwargs = OJson::object();            // defaults under each request's own kwargs
  // Every reply that carries no constraint of its own follows this grammar (kapitsa serve --grammar-file).
  std::shared_ptr<const text::Grammar> default_grammar;
  // The budget of a request that names none (kapitsa serve --max-output-tokens): one client that sends
  // no max_tokens cannot hold a sequence until the context is full.
  int64_t max_output_tokens = 32768;
  // Generations waiting for a sequence slot beyond the engine's max_sequences (kapitsa serve
  // --max-queue): one more is answered 429 with Retry-After instead of waiting without bound.
  int max_queued = 256;
};

// A conversation ready to render: normalised messages and tools plus template variables.
struct ChatInput {
  OJson messages = OJson::array();
  NormalizedTools tools;
  bool offer_tools = true;  // false for tool_choice "none": tools are left out of the prompt
  OutputConstraint constraint;
  OJson kwargs = OJson::object();
};

// The shared chat prompt (text, ids, turn boundary, end-of-turn ids, reply parser; text/chat) plus what
// only the server adds. A raw completion fills text and ids only.
struct PreparedPrompt : text::ChatPrompt {
  std::string cache_key;  // the conversation's session key (GenerateRequest::cache_key), set by the endpoint
  std::set<std::string> custom_tools;
  std::shared_ptr<const text::Grammar> grammar;  // the output constraint, in the model's own formats; or null
};

struct Metrics {
  std::atomic<int64_t> prompt_tokens{0}, cached_prompt_tokens{0}, completion_tokens{0};
  std::atomic<int64_t> streams_active{0}, client_disconnects{0};
  std::atomic<int64_t> decode_tokens{0}, decode_micros{0};  // for the mean decode rate
  std::atomic<int64_t> rejected_overloaded{0};               // answered 429: the queue was full
  std::mutex mutex;
  std::map<std::string, int64_t> requests;  // "endpoint status" → count
  void count_request(const std::string& endpoint, int status);
};

class Service {
 public:
  explicit Service(ServiceOptions options);

  // Installs the loaded model; /health turns 200 from here on.
  // `sampling`: what a request that sets no sampling field gets (the model's generation_config).
  void set_model(std::shared_ptr<runtime::Engine> engine, std::shared_ptr<const text::ChatTemplate> chat_template,
                 runtime::SamplingParams sampling = {});
  const runtime::SamplingParams& default_sampling() const { return default_sampling_; }
  bool ready() const { return ready_.load(); }
  runtime::Engine& engine() const { return *engine_; }
  const ServiceOptions& options() const { return options_; }
  const std::string& model_id() const { return options_.model_ids.front(); }
  int64_t context_tokens() const;

  // Ready and not shutting down, and `model` (the request's field) names a served model.
  std::optional<ApiError> check_model(const OJson& body) const;

  ApiResult<PreparedPrompt> prepare_chat(ChatInput input) const;  // moved in: a long conversation is not copied
  ApiResult<PreparedPrompt> prepare_text(const std::string& prompt) const;  // raw completions
  // Tokens for count_tokens-style endpoints (rendered prompt, generation prompt included).
  ApiResult<size_t> count_chat_tokens(const ChatInput& input) const;

  // The completion budget: the request's, or max_output_tokens when it names none; clamped to what the
  // context leaves.
  int max_tokens(std::optional<int64_t> requested, size_t prompt_tokens) const;

  // Submits to the engine; the Generation is tracked until destroyed so shutdown can cancel it.
  ApiResult<std::unique_ptr<runtime::Generation>> submit(runtime::GenerateRequest request);
  void record_finish(const runtime::FinishEvent& finish);

  // The part every streaming endpoint shares: when the stream's opening events went out (`opened`), run
  // the generation to its end through the output parser; otherwise cancel it. Then release it and keep
  // the counters (active streams, finishes, client disconnects).
  // A reply that ended normally is then preloaded as the next turn's history (preload_next_turn).
  TurnResult stream_turn(std::unique_ptr<runtime::Generation>& generation, const PreparedPrompt& prompt, bool opened,
                         const TurnCallbacks& callbacks);
  // The same for a whole (non-streamed) response: run to the end, release, count, preload.
  TurnResult whole_turn(std::unique_ptr<runtime::Generation>& generation, const PreparedPrompt& prompt,
                        const TurnCallbacks& callbacks);
  // After a reply that ended normally (a stop, tool calls included, or its budget): renders the conversation with the
  // reply as history, as the client's next request will (text/chat/next_turn.h), and asks the engine to
  // fold it while the client reads. Chat prompts only; failures cost only the head start (logged).
  void preload_next_turn(const PreparedPrompt& prompt, const TurnResult& result);

  // Refuse new requests and cancel every running generation (their streams then end normally).
  void shutdown();
  bool shutting_down() const { return shutting_down_.load(); }

  Metrics& metrics() { return metrics_; }

 private:
  class Tracked;
  // prepare_chat; `fit_context` false: a prompt longer than the context is returned, not refused.
  ApiResult<PreparedPrompt> prepare(ChatInput input, bool fit_context) const;
  void untrack(Tracked* g);

  ServiceOptions options_;
  std::shared_ptr<runtime::Engine> engine_;
  std::shared_ptr<const text::ChatTemplate> template_;
  // Encodes each chat prompt reusing the ids of an earlier one that shares its prefix (the previous
  // request of the conversation, or its preloaded history): encoding grows with the new text only.
  std::shared_ptr<text::PromptEncoder> encoder_;
  runtime::SamplingParams default_sampling_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shutting_down_{false};
  std::mutex mutex_;
  std::set<Tracked*> running_;
  Metrics metrics_;
};

}  // namespace kapitsa::server
