// The output parser's state machine. buf_ holds only unprocessed input, so each step looks at the
// start of it; a call body stays in buf_ until its closing tag arrives (searched from call_scan_, so a
// long call fed byte by byte stays linear).
#include "text/parse/output_parser.h"

#include "text/parse/tool_calls.h"
#include "text/tokenizer/utf8.h"

#include <algorithm>

namespace kapitsa::text {
namespace {

constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>";
constexpr std::string_view kToolCall = "<tool_call>", kToolCallEnd = "</tool_call>";
constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kNemotron = "<TOOLCALL>", kNemotronEnd = "</TOOLCALL>";


bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kThink);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkEnd);
  return close == std::string_view::npos || close < open;
}

OutputParser::OutputParser(ParserOptions options)
    : options_(std::move(options)),
      mode_(options_.reasoning && options_.starts_in_reasoning ? Mode::reasoning : Mode::content),
      passthrough_(!options_.reasoning && options_.tools == ToolFormat::none),
      strip_leading_(!passthrough_),
      think_allowed_(options_.reasoning && !options_.starts_in_reasoning) {}

ParseEvents OutputParser::feed(std::string_view chunk) {
  buf_.append(chunk);
  process(false);
  return std::move(out_);
}

ParseEvents OutputParser::finish() {
  process(true);
  flush_held();
  return std::move(out_);
}

void OutputParser::process(bool final) {
  out_.clear();
  bool progress = true;
  while (progress && !buf_.empty()) {
    switch (mode_) {
      case Mode::content: progress = process_content(final); break;
      case Mode::reasoning: progress = process_reasoning(final); break;
      case Mode::call: progress = process_call(final); break;
    }
  }
  if (final && mode_ == Mode::call) process_call(true);  // an empty unclosed call
}

size_t OutputParser::hold_back(size_t end, std::initializer_list<std::string_view> tags) const {
  const std::string_view s(buf_.data(), end);
  size_t keep = 0;
  for (std::string_view tag : tags) {
    if (tag.empty()) continue;
    for (size_t k = std::min(tag.size() - 1, s.size()); k > keep; --k)
      if (s.substr(s.size() - k) == tag.substr(0, k)) {
        keep = k;
        break;
      }
  }
  return keep + utf8_incomplete_tail(s.substr(0, s.size() - keep));
}

void OutputParser::push_text(ParseEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == kind) {
    out_.back().text.append(text);
    return;
  }
  ParseEvent e;
  e.kind = kind;
  e.text = std::string(text);
  out_.push_back(std::move(e));
}

void OutputParser::push_warning(std::string message) {
  ParseEvent e;
  e.kind = ParseEvent::Kind::warning;
  e.text = std::move(message);
  out_.push_back(std::move(e));
}

void OutputParser::emit_text(ParseEvent::Kind kind, std::string_view text) {
  if (passthrough_) return push_text(kind, text);
  if (strip_leading_) {
    while (!text.empty() && is_json_space(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    strip_leading_ = false;
  }
  size_t body = text.size();
  while (body > 0 && is_json_space(text[body - 1])) --body;
  if (body == 0) {
    held_ws_.append(text);
    held_kind_ = kind;
    return;
  }
  if (held_kind_ == kind) push_text(kind, held_ws_);
  held_ws_.clear();
  push_text(kind, text.substr(0, body));
  held_ws_.assign(text.substr(body));
  held_kind_ = kind;
}

void OutputParser::flush_held() {
  push_text(held_kind_, held_ws_);
  held_ws_.clear();
}

bool OutputParser::process_reasoning(bool final) {
  const size_t close = buf_.find(kThinkEnd);
  if (close != std::string::npos) {
    emit_text(ParseEvent::Kind::reasoning, std::string_view(buf_).substr(0, close));
    held_ws_.clear();  // whitespace before </think> is markup
    buf_.erase(0, close + kThinkEnd.size());
    mode_ = Mode::content;
    strip_leading_ = true;
    think_allowed_ = false;
    return true;
  }
  const size_t end = final ? buf_.size() : buf_.size() - hold_back(buf_.size(), {kThinkEnd});
  emit_text(ParseEvent::Kind::reasoning, std::string_view(buf_).substr(0, end));
  buf_.erase(0, end);
  return false;
}

bool OutputParser::process_content(bool final) {
  if (passthrough_) {
    const size_t end = final ? buf_.size() : buf_.size() - utf8_incomplete_tail(buf_);
    push_text(ParseEvent::Kind::content, std::string_view(buf_).substr(0, end));
    buf_.erase(0, end);
    return false;
  }
  if (strip_leading_) {  // leading whitespace is dropped anyway; doing it here lets prefix checks see the tag
    size_t n = 0;
    while (n < buf_.size() && is_json_space(buf_[n])) ++n;
    buf_.erase(0, n);
    if (buf_.empty()) return false;
  }
  // Markup that is only recognised at the start of the content (nothing shown yet / right after a call).
  auto at_start = [&](std::string_view tag, bool& flag) -> int {  // 1 matched, 0 no, -1 need more input
    if (!flag) return 0;
    if (starts_with(buf_, tag)) {
      buf_.erase(0, tag.size());
      flag = false;
      return 1;
    }
    if (!final && starts_with(tag, buf_)) return -1;
    flag = false;
    return 0;
  };
  const int think = at_start(kThink, think_allowed_);
  if (think < 0) return false;
  if (think > 0) {
    mode_ = Mode::reasoning;
    strip_leading_ = true;
    return true;
  }
  const int stray = at_start(kToolCallEnd, drop_stray_close_);
  if (stray < 0) return false;
  if (stray > 0) return true;

  // The earliest tag in the text (ties: the longer one).
  std::string_view tags[4];
  size_t n_tags = 0;
  switch (options_.tools) {
    case ToolFormat::none: break;
    case ToolFormat::qwen_xml:
      tags[n_tags++] = kToolCall;
      tags[n_tags++] = kFunction;
      break;
    case ToolFormat::hermes_json: tags[n_tags++] = kToolCall; break;
    case ToolFormat::nemotron: tags[n_tags++] = kNemotron; break;
  }
  if (options_.reasoning) tags[n_tags++] = kThinkEnd;  // a stray </think> is markup too: dropped
  size_t best = std::string::npos;
  std::string_view best_tag;
  for (size_t i = 0; i < n_tags; ++i) {
    const size_t at = buf_.find(tags[i]);
    if (at != std::string::npos && (at < best || (at == best && tags[i].size() > best_tag.size()))) {
      best = at;
      best_tag = tags[i];
    }
  }
  if (best == std::string::npos) {
    size_t end = buf_.size();
    if (!final) {
      size_t keep = 0;
      for (size_t i = 0; i < n_tags; ++i) keep = std::max(keep, hold_back(buf_.size(), {tags[i]}));
      end -= keep;
    }
    emit_text(ParseEvent::Kind::content, std::string_view(buf_).substr(0, end));
    buf_.erase(0, end);
    return false;
  }
  emit_text(ParseEvent::Kind::content, std::string_view(buf_).substr(0, best));
  held_ws_.clear();  // whitespace before markup is dropped
  buf_.erase(0, best + best_tag.size());
  strip_leading_ = true;
  if (best_tag == kThinkEnd) return true;
  mode_ = Mode::call;
  call_open_ = std::string(best_tag);
  call_close_ = std::string(best_tag == kNemotron ? kNemotronEnd : best_tag == kFunction ? kFunctionEnd : kToolCallEnd);
  call_scan_ = 0;
  return true;
}

bool OutputParser::process_call(bool final) {
  const size_t close = buf_.find(call_close_, call_scan_);
  if (close == std::string::npos) {
    if (!final) {
      call_scan_ = buf_.size() >= call_close_.size() ? buf_.size() - call_close_.size() + 1 : 0;
      return false;
    }
    handle_call(buf_, false);
    buf_.clear();
    mode_ = Mode::content;
    return false;
  }
  const bool parsed = handle_call(std::string_view(buf_).substr(0, close), true);
  buf_.erase(0, close + call_close_.size());
  mode_ = Mode::content;
  strip_leading_ = parsed;  // whitespace after a call is markup; after text shown for a bad call it is not
  return true;
}

bool OutputParser::handle_call(std::string_view body, bool closed) {
  Expected<std::vector<ToolCall>> calls = Error{};
  try {
    if (call_open_ == kNemotron) {
      calls = parse_nemotron_calls(body);
    } else if (call_open_ == kFunction) {
      calls = parse_qwen_xml_call(std::string(kFunction) + std::string(body) + (closed ? std::string(kFunctionEnd) : ""),
                                  options_.tool_schemas);
      drop_stray_close_ = true;
    } else {
      // <tool_call> holds JSON (Hermes) or XML (Qwen3-Coder style) whichever format was asked for:
      // Qwen3-family models are seen writing both.
      size_t first = 0;
      while (first < body.size() && is_json_space(body[first])) ++first;
      if (first < body.size() && body[first] == '{') calls = parse_hermes_call(body);
      else calls = parse_qwen_xml_call(body, options_.tool_schemas);
    }
  } catch (const std::exception& e) {  // a bug in a body parser must not take the server down
    calls = Error{std::string("tool call parser failed: ") + e.what()};
  }
  if (calls.ok() && !closed)
    push_warning(fmt::format("tool call not closed with {} before the end of the output", call_close_));
  if (calls.ok()) {
    for (ToolCall& call : *calls) {
      ParseEvent e;
      e.kind = ParseEvent::Kind::tool_call;
      e.call = std::move(call);
      out_.push_back(std::move(e));
    }
    return true;
  }
  // Malformed: show it as the text the model wrote, and say why.
  push_warning("malformed tool call returned as text: " + calls.error().message);
  push_text(ParseEvent::Kind::content, call_open_);
  push_text(ParseEvent::Kind::content, body);
  if (closed) push_text(ParseEvent::Kind::content, call_close_);
  return false;
}

}  // namespace kapitsa::text
