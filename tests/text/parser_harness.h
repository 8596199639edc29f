// Shared by the parser tests: runs an OutputParser over a text cut into chunks and normalises the
// events (adjacent text fragments of one kind joined) so that different cuts can be compared.
#pragma once

#include "test_util.h"
#include "text/parse/output_parser.h"
#include "text/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::testing {

inline void append_joined(text::ParseEvents& into, const text::ParseEvents& events) {
  using Kind = text::ParseEvent::Kind;
  for (const text::ParseEvent& e : events) {
    const bool is_text = e.kind == Kind::content || e.kind == Kind::reasoning;
    if (is_text && e.text.empty()) continue;
    if (is_text && !into.empty() && into.back().kind == e.kind) into.back().text += e.text;
    else into.push_back(e);
  }
}

// Feeds `text` cut at `cuts` (ascending byte offsets). Every emitted text fragment must be valid UTF-8
// when the input is, and, when `markup_free` is set, must not contain '<' (no partial markup leaked).
inline text::ParseEvents run_parser(const text::ParserOptions& options, std::string_view text,
                                    const std::vector<size_t>& cuts, bool markup_free = false) {
  text::OutputParser parser(options);
  text::ParseEvents joined;
  const bool valid = text::utf8_is_valid(text);
  auto check = [&](const text::ParseEvents& events) {
    for (const text::ParseEvent& e : events) {
      if (e.kind != text::ParseEvent::Kind::content && e.kind != text::ParseEvent::Kind::reasoning) continue;
      if (valid) {
        EXPECT_TRUE(text::utf8_is_valid(e.text)) << "half a character in " << e.text;
      }
      if (markup_free) {
        EXPECT_EQ(e.text.find('<'), std::string::npos) << "markup leaked: " << e.text;
      }
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    auto events = parser.feed(text.substr(at, cut - at));
    check(events);
    append_joined(joined, events);
    at = cut;
  }
  auto events = parser.feed(text.substr(at));
  check(events);
  append_joined(joined, events);
  events = parser.finish();
  check(events);
  append_joined(joined, events);
  return joined;
}

inline std::string describe(const text::ParseEvents& events) {
  std::string s;
  for (const text::ParseEvent& e : events) {
    switch (e.kind) {
      case text::ParseEvent::Kind::content: s += "content: " + e.text; break;
      case text::ParseEvent::Kind::reasoning: s += "reasoning: " + e.text; break;
      case text::ParseEvent::Kind::tool_call: s += "call: " + e.call.name + " " + e.call.arguments; break;
      case text::ParseEvent::Kind::warning: s += "warning: " + e.text; break;
    }
    s += "\n";
  }
  return s;
}

}  // namespace kapitsa::testing
