// OutputParser: splits a model's streamed text into content, reasoning and tool calls, incrementally.
// Fed arbitrary chunks (even split inside a tag or a UTF-8 character) it emits the same events as when
// fed everything at once, up to how text fragments are cut. It never shows partial markup: text that
// could be the start of a tag is held until it resolves. Whitespace that only separates markup (after
// <think>, around </think> and tool calls) is dropped. A malformed tool call is returned as content
// plus a warning event; nothing here aborts or throws on model output.
#pragma once

#include "base/json.h"
#include "text/parse/events.h"

#include <string>
#include <string_view>

namespace kapitsa::text {

enum class ToolFormat {
  none,
  qwen_xml,     // <tool_call><function=NAME><parameter=ARG>…  (a bare <function=…> block is accepted too)
  hermes_json,  // <tool_call>{"name": …, "arguments": {…}}</tool_call>
  nemotron,     // <TOOLCALL>[{"name": …, "arguments": {…}}, …]</TOOLCALL>
};

struct ParserOptions {
  bool reasoning = false;            // the model may write <think>…</think> at the start of its output
  bool starts_in_reasoning = false;  // the prompt already opened <think> (Qwen3.5, Nemotron 3 thinking)
  ToolFormat tools = ToolFormat::none;
  Json tool_schemas;                 // the request's tools, for the argument types of XML calls
};

// Whether a rendered prompt leaves a <think> open (the generation starts inside reasoning).
bool prompt_opens_reasoning(std::string_view prompt);

class OutputParser {
 public:
  explicit OutputParser(ParserOptions options);

  ParseEvents feed(std::string_view chunk);
  // End of generation: releases everything held; an unclosed tool call is parsed if it can be,
  // otherwise returned as content with a warning.
  ParseEvents finish();

 private:
  enum class Mode { content, reasoning, call };
  void process(bool final);
  bool process_content(bool final);  // each returns false when it needs more input
  bool process_reasoning(bool final);
  bool process_call(bool final);
  void emit_text(ParseEvent::Kind kind, std::string_view text);
  void flush_held();
  void push_text(ParseEvent::Kind kind, std::string_view text);
  void push_warning(std::string message);
  bool handle_call(std::string_view body, bool closed);  // false: shown as text
  // How many trailing bytes of buf_[0, end) to hold back: a possible tag start or half a character.
  size_t hold_back(size_t end, std::initializer_list<std::string_view> tags) const;

  ParserOptions options_;
  Mode mode_;
  std::string buf_;           // input not yet turned into events
  ParseEvents out_;           // events of the current feed()/finish()
  bool passthrough_;          // no markup to look for: text goes straight out
  bool strip_leading_ = true; // drop whitespace before the next text (start, after markup)
  bool think_allowed_;        // "<think>" may still open (nothing shown yet)
  bool drop_stray_close_ = false;  // a "</tool_call>" may follow a bare <function=…> call
  std::string held_ws_;       // trailing whitespace held back: dropped if markup follows
  ParseEvent::Kind held_kind_ = ParseEvent::Kind::content;
  std::string call_open_;     // the tag that opened the current call
  std::string call_close_;    // the tag that closes it
  size_t call_scan_ = 0;      // where to resume looking for call_close_ in buf_
};

}  // namespace kapitsa::text
