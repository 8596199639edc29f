// The channel between the engine thread and one Generation: an event queue the engine fills and the
// reader drains, plus the cancel flag the reader raises. Internal to the runtime.
// Invariant: exactly one FinishEvent is ever pushed, and nothing after it.
#pragma once

#include "runtime/engine.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace kapitsa::runtime {

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  bool finished = false;  // the FinishEvent was pushed
  std::atomic<bool> cancel_requested{false};

  void push(Event event);  // ignored after the FinishEvent
};

class GenerationImpl final : public Generation {
 public:
  // `wake` tells the engine thread to look at cancellations.
  GenerationImpl(std::shared_ptr<Channel> channel, std::function<void()> wake)
      : channel_(std::move(channel)), wake_(std::move(wake)) {}
  ~GenerationImpl() override;

  bool next(Event& event) override;
  bool next_for(Event& event, std::chrono::milliseconds timeout, bool& timed_out) override;
  void cancel() override;

 private:
  bool pop(Event& event);  // with the lock held

  std::shared_ptr<Channel> channel_;
  std::function<void()> wake_;
  bool done_ = false;  // the FinishEvent was returned
};

}  // namespace kapitsa::runtime
