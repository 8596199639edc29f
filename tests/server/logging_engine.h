// LoggingEngine: the real engine behind a wrapper that keeps the last submitted prompt's ids and when
// it was submitted (the server's preparation ends there), for tests that check what the server sent
// the engine. next_turn_test.cpp uses it as it is; agent_session.h's Replayer adds the forced reply.
#pragma once

#include "runtime/engine.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kapitsa::server::testing {

class LoggingEngine : public runtime::Engine {
 public:
  explicit LoggingEngine(std::unique_ptr<runtime::Engine> inner) : inner_(std::move(inner)) {}
  Expected<std::unique_ptr<runtime::Generation>> submit(runtime::GenerateRequest request) override {
    {
      std::lock_guard lock(mu_);
      last_ = request.prompt_ids;
      submitted_ = std::chrono::steady_clock::now();
    }
    return inner_->submit(std::move(request));
  }
  Status preload(std::vector<int32_t> ids, std::string key) override { return inner_->preload(std::move(ids), std::move(key)); }
  const models::ModelInfo& model_info() const override { return inner_->model_info(); }
  const text::Tokenizer& tokenizer() const override { return inner_->tokenizer(); }
  runtime::EngineCounters counters() const override { return inner_->counters(); }
  const runtime::EngineOptions& options() const override { return inner_->options(); }

  std::vector<int32_t> last_prompt() const {
    std::lock_guard lock(mu_);
    return last_;
  }
  // When the last request reached the engine.
  std::chrono::steady_clock::time_point last_submit() const {
    std::lock_guard lock(mu_);
    return submitted_;
  }

 protected:
  mutable std::mutex mu_;  // guards what this class and subclasses log

 private:
  std::unique_ptr<runtime::Engine> inner_;
  std::vector<int32_t> last_;
  std::chrono::steady_clock::time_point submitted_;
};

}  // namespace kapitsa::server::testing
