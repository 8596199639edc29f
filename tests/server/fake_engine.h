// FakeEngine: a runtime::Engine that plays scripted generations (token texts, then a finish reason),
// so the server's endpoints can be tested without a model. It validates like the real engine
// (empty prompt, prompt longer than the context), clamps max_tokens, honours cancel(), can delay the
// first token (a long prefill) and each next token, records every request and cancellation, and can fail
// the next submit with any Error (kind and message).
#pragma once

#include "runtime/engine.h"
#include "text/tokenizer/tokenizer.h"

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kapitsa::server::testing {

struct Script {
  Script(std::vector<std::string> t = {}, runtime::FinishReason r = runtime::FinishReason::stop,
         std::string stop = "<|im_end|>", std::string err = {})
      : tokens(std::move(t)), reason(r), matched_stop(std::move(stop)), error(std::move(err)) {}
  std::vector<std::string> tokens;
  runtime::FinishReason reason = runtime::FinishReason::stop;
  std::string matched_stop = "<|im_end|>";
  std::string error;
  std::chrono::milliseconds first_delay{0};  // before the first token (prefill)
  std::chrono::milliseconds delay{0};        // before each later token
  int cached_prompt_tokens = 0;
};

class FakeEngine : public runtime::Engine {
 public:
  FakeEngine(std::shared_ptr<const text::Tokenizer> tokenizer, int64_t context_tokens = 4096)
      : tokenizer_(std::move(tokenizer)) {
    options_.context_tokens = context_tokens;
    info_.model_type = "qwen3_5";
    info_.max_position_embeddings = context_tokens;
    info_.vocab_size = tokenizer_->vocab_size();
  }

  void push(Script s) {
    std::lock_guard lock(mutex_);
    scripts_.push_back(std::move(s));
  }
  void set_default(Script s) {
    std::lock_guard lock(mutex_);
    default_ = std::move(s);
  }
  // The next submit fails with `e` (as the real engine's validation would, with the kind it sets).
  void fail_next_submit(Error e) {
    std::lock_guard lock(mutex_);
    submit_error_ = std::move(e);
  }
  // Decides the script from the request (the decoded prompt) when no pushed script is waiting.
  void set_responder(std::function<Script(const std::string& prompt)> f) {
    std::lock_guard lock(mutex_);
    responder_ = std::move(f);
  }
  std::vector<runtime::GenerateRequest> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  runtime::GenerateRequest last_request() const {
    std::lock_guard lock(mutex_);
    return requests_.back();
  }
  std::string last_prompt() const { return tokenizer_->decode(last_request().prompt_ids); }
  int cancelled() const { return cancelled_->load(); }
  int live() const { return live_->load(); }

  Expected<std::unique_ptr<runtime::Generation>> submit(runtime::GenerateRequest request) override {
    {
      std::lock_guard lock(mutex_);
      if (submit_error_) {
        Error e = std::move(*submit_error_);
        submit_error_.reset();
        return e;
      }
    }
    if (request.prompt_ids.empty()) return Error{"empty prompt"};
    if (static_cast<int64_t>(request.prompt_ids.size()) >= options_.context_tokens)
      return error(ErrorKind::context_too_long, "prompt longer than the context");
    Script s;
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
      if (!scripts_.empty()) {
        s = std::move(scripts_.front());
        scripts_.pop_front();
      } else if (responder_) {
        s = responder_(tokenizer_->decode(request.prompt_ids));
      } else {
        s = default_;
      }
    }
    const int room = static_cast<int>(options_.context_tokens - static_cast<int64_t>(request.prompt_ids.size()));
    const int budget = std::min(request.max_tokens, room);
    if (static_cast<int>(s.tokens.size()) > budget) {
      s.tokens.resize(budget);
      s.reason = runtime::FinishReason::length;
      s.matched_stop.clear();
    }
    return std::unique_ptr<runtime::Generation>(
        std::make_unique<Gen>(std::move(s), request, tokenizer_.get(), cancelled_, live_));
  }

  Status preload(std::vector<int32_t> ids, std::string cache_key) override {
    std::lock_guard lock(mutex_);
    preloads_.emplace_back(std::move(ids), std::move(cache_key));
    return ok_status();
  }
  // Every preload asked for: (ids, cache_key).
  std::vector<std::pair<std::vector<int32_t>, std::string>> preloads() const {
    std::lock_guard lock(mutex_);
    return preloads_;
  }

  const models::ModelInfo& model_info() const override { return info_; }
  const text::Tokenizer& tokenizer() const override { return *tokenizer_; }
  // Speculative-decoding counters the fake reports (proposer name and draft totals), for /metrics.
  void set_speculation(const runtime::EngineCounters& c) {
    std::lock_guard lock(mutex_);
    speculation_ = c;
  }

  runtime::EngineCounters counters() const override {
    std::lock_guard lock(mutex_);
    runtime::EngineCounters c;
    c.proposer = speculation_.proposer;
    c.draft_tokens = speculation_.draft_tokens;
    c.draft_tokens_accepted = speculation_.draft_tokens_accepted;
    c.draft_steps = speculation_.draft_steps;
    c.requests = static_cast<int64_t>(requests_.size());
    c.running = live_->load();
    return c;
  }
  const runtime::EngineOptions& options() const override { return options_; }

 private:
  class Gen : public runtime::Generation {
   public:
    Gen(Script s, const runtime::GenerateRequest& r, const text::Tokenizer* tok, std::shared_ptr<std::atomic<int>> cancelled,
        std::shared_ptr<std::atomic<int>> live)
        : s_(std::move(s)), prompt_tokens_(static_cast<int>(r.prompt_ids.size())), top_(r.top_logprobs), tok_(tok),
          cancelled_count_(std::move(cancelled)), live_(std::move(live)) {
      ++*live_;
      ready_ = std::chrono::steady_clock::now() + s_.first_delay;
    }
    ~Gen() override { --*live_; }

    bool next(runtime::Event& event) override {
      bool timed_out = false;
      return next_for(event, std::chrono::hours(1), timed_out);
    }
    bool next_for(runtime::Event& event, std::chrono::milliseconds timeout, bool& timed_out) override {
      timed_out = false;
      if (done_) return false;
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!cancel_.load() && std::chrono::steady_clock::now() < ready_) {
        if (std::chrono::steady_clock::now() >= deadline) {
          timed_out = true;
          return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (cancel_.load() || pos_ >= s_.tokens.size()) {
        runtime::FinishEvent f;
        f.reason = cancel_.load() ? runtime::FinishReason::cancelled : s_.reason;
        if (f.reason == runtime::FinishReason::stop) f.matched_stop = s_.matched_stop;
        f.error = s_.error;
        f.stats.prompt_tokens = prompt_tokens_;
        f.stats.cached_prompt_tokens = s_.cached_prompt_tokens;
        f.stats.completion_tokens = static_cast<int>(pos_);
        f.stats.decode_tokens_per_s = 100;
        event = f;
        done_ = true;
        return true;
      }
      runtime::TokenEvent t;
      t.text = s_.tokens[pos_++];
      auto ids = tok_->encode(t.text);
      t.id = ids.empty() ? 0 : ids[0];
      t.logprob = -0.25f;
      for (int i = 0; i < top_; ++i) t.top.push_back({t.id + i, -0.25f - i});
      event = t;
      ready_ = std::chrono::steady_clock::now() + s_.delay;
      return true;
    }
    void cancel() override {
      if (!cancel_.exchange(true)) ++*cancelled_count_;
    }

   private:
    Script s_;
    int prompt_tokens_;
    int top_;
    const text::Tokenizer* tok_;
    std::shared_ptr<std::atomic<int>> cancelled_count_, live_;
    std::atomic<bool> cancel_{false};
    size_t pos_ = 0;
    bool done_ = false;
    std::chrono::steady_clock::time_point ready_;
  };

  std::shared_ptr<const text::Tokenizer> tokenizer_;
  runtime::EngineOptions options_;
  models::ModelInfo info_;
  mutable std::mutex mutex_;
  std::deque<Script> scripts_;
  Script default_{{"Hello", " from", " the", " fake."}};
  std::function<Script(const std::string&)> responder_;
  std::optional<Error> submit_error_;
  std::vector<runtime::GenerateRequest> requests_;
  runtime::EngineCounters speculation_;
  std::vector<std::pair<std::vector<int32_t>, std::string>> preloads_;
  std::shared_ptr<std::atomic<int>> cancelled_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace kapitsa::server::testing
