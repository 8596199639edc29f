// run_turn: drives one Generation to its end, feeding token text through the OutputParser and handing
// content / reasoning / tool-call events to the endpoint as they resolve. Every path returns a
// FinishEvent: a normal end, a length limit, an error, or the client going away (the generation is
// then cancelled). While nothing arrives for the keep-alive interval (a long prefill) on_idle runs so
// the endpoint can send a ping and notice a disconnected client. Knows no wire format.
#pragma once

#include "runtime/engine.h"
#include "text/parse/output_parser.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace kapitsa::server {

struct TurnCallbacks {
  // A parsed event (content / reasoning fragment, complete tool call); false: the client is gone.
  std::function<bool(const text::ParseEvent&)> on_event;
  // Called before on_event for the text of each token (logprobs); may be empty.
  std::function<void(const runtime::TokenEvent&)> on_token;
  // Nothing produced for the keep-alive interval; false: the client is gone. May be empty.
  std::function<bool()> on_idle;
};

struct TurnResult {
  runtime::FinishEvent finish;
  bool client_gone = false;
  int tool_calls = 0;
  // The reply as parsed (what the client gets, and sends back as history next turn).
  std::string content, reasoning;
  std::vector<text::ToolCall> calls;
};

TurnResult run_turn(runtime::Generation& generation, text::OutputParser& parser, const TurnCallbacks& callbacks,
                    std::chrono::milliseconds keepalive);

// Counts reasoning tokens from token texts: from the start when the prompt opened <think> (or from a
// "<think>" token) through the "</think>" token. Feed every TokenEvent's text in order.
struct ReasoningCounter {
  bool inside = false;
  int tokens = 0;
  void add(const std::string& text) {
    if (text.find("<think>") != std::string::npos) inside = true;
    if (inside) ++tokens;
    if (text.find("</think>") != std::string::npos) inside = false;
  }
};

// How a turn ended, in API-neutral terms.
enum class StopKind { end, stop_sequence, length, tool_calls, error };
// `stop_strings` are the request's own stop sequences (to tell them from the end-of-turn token).
StopKind stop_kind(const TurnResult& result, const std::vector<std::string>& stop_strings);

}  // namespace kapitsa::server
