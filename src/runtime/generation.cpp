// Generation: the reader's side of a Channel (see generation.h).
#include "runtime/generation.h"

namespace kapitsa::runtime {

void Channel::push(Event event) {
  {
    std::lock_guard lock(mu);
    if (finished) return;
    finished = std::holds_alternative<FinishEvent>(event);
    events.push_back(std::move(event));
  }
  cv.notify_all();
}

GenerationImpl::~GenerationImpl() {
  if (!done_) cancel();
}

bool GenerationImpl::pop(Event& event) {
  event = std::move(channel_->events.front());
  channel_->events.pop_front();
  if (std::holds_alternative<FinishEvent>(event)) done_ = true;
  return true;
}

bool GenerationImpl::next(Event& event) {
  if (done_) return false;
  std::unique_lock lock(channel_->mu);
  channel_->cv.wait(lock, [&] { return !channel_->events.empty(); });
  return pop(event);
}

bool GenerationImpl::next_for(Event& event, std::chrono::milliseconds timeout, bool& timed_out) {
  timed_out = false;
  if (done_) return false;
  std::unique_lock lock(channel_->mu);
  if (!channel_->cv.wait_for(lock, timeout, [&] { return !channel_->events.empty(); })) {
    timed_out = true;
    return false;
  }
  return pop(event);
}

void GenerationImpl::cancel() {
  if (channel_->cancel_requested.exchange(true)) return;
  if (wake_) wake_();
}

}  // namespace kapitsa::runtime
