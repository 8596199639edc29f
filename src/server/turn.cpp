// run_turn (see turn.h).
#include "server/turn.h"

#include <algorithm>

namespace kapitsa::server {

TurnResult run_turn(runtime::Generation& generation, text::OutputParser& parser, const TurnCallbacks& cb,
                    std::chrono::milliseconds keepalive) {
  TurnResult result;
  auto deliver = [&](const text::ParseEvents& events) {
    for (const auto& e : events) {
      if (e.kind == text::ParseEvent::Kind::warning) continue;  // malformed call: its text came as content
      if (e.kind == text::ParseEvent::Kind::tool_call) {
        ++result.tool_calls;
        result.calls.push_back(e.call);
      }
      if (e.kind == text::ParseEvent::Kind::content) result.content += e.text;
      if (e.kind == text::ParseEvent::Kind::reasoning) result.reasoning += e.text;
      if (!cb.on_event(e)) return false;
    }
    return true;
  };
  auto abandon = [&] {
    // The client is gone: stop the work and wait for the engine's FinishEvent (freeing its memory).
    result.client_gone = true;
    generation.cancel();
    runtime::Event ev;
    while (generation.next(ev))
      if (auto* f = std::get_if<runtime::FinishEvent>(&ev)) result.finish = *f;
    result.finish.reason = runtime::FinishReason::cancelled;
    return result;
  };

  runtime::Event ev;
  for (;;) {
    bool timed_out = false;
    const bool got = generation.next_for(ev, keepalive, timed_out);
    if (!got) {
      if (timed_out) {
        if (cb.on_idle && !cb.on_idle()) return abandon();
        continue;
      }
      // The engine ended the stream without a FinishEvent: treat it as an error, still end cleanly.
      result.finish.reason = runtime::FinishReason::error;
      result.finish.error = "the generation ended unexpectedly";
      deliver(parser.finish());
      return result;
    }
    if (auto* t = std::get_if<runtime::TokenEvent>(&ev)) {
      if (cb.on_token) cb.on_token(*t);
      if (!t->text.empty() && !deliver(parser.feed(t->text))) return abandon();
      continue;
    }
    result.finish = std::get<runtime::FinishEvent>(ev);
    if (!deliver(parser.finish())) {
      result.client_gone = true;
      return result;
    }
    return result;
  }
}

StopKind stop_kind(const TurnResult& r, const std::vector<std::string>& stop_strings) {
  switch (r.finish.reason) {
    case runtime::FinishReason::length: return StopKind::length;
    case runtime::FinishReason::error: return StopKind::error;
    case runtime::FinishReason::cancelled:
    case runtime::FinishReason::stop: break;
  }
  if (r.tool_calls > 0) return StopKind::tool_calls;
  if (!r.finish.matched_stop.empty() &&
      std::find(stop_strings.begin(), stop_strings.end(), r.finish.matched_stop) != stop_strings.end())
    return StopKind::stop_sequence;
  return StopKind::end;
}

}  // namespace kapitsa::server
