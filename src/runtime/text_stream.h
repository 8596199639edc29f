// Incremental text of a generation, with stop strings. StopMatcher finds stop strings in text that
// arrives in arbitrary pieces (a stop string may span many tokens): it releases text only once it can
// no longer be the start of a stop string, and never releases the stop string itself or anything
// after it. TextStream adds the token → UTF-8 step (whole characters only, via text::StreamDecoder).
// Invariant: concatenating everything released equals the full decoded text cut before the first
// stop string (or all of it when none matched).
#pragma once

#include "text/tokenizer/stream_decoder.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {
class Tokenizer;
}

namespace kapitsa::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;     // safe to show now
    bool stopped = false;
    std::string matched;  // the stop string, when stopped
  };
  // Adds decoded text. After a stop, further input is ignored.
  Result push(std::string_view text);
  // End of the generation: releases what was held back (it did not turn into a stop string).
  std::string flush();
  size_t held() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

// Token ids → released text. Without a tokenizer (id-only engines) all text is empty.
class TextStream {
 public:
  TextStream(const text::Tokenizer* tokenizer, std::vector<std::string> stops);

  StopMatcher::Result push(int32_t id);
  std::string flush();  // the end: a half character (U+FFFD) and the held text

 private:
  std::optional<text::StreamDecoder> decoder_;
  StopMatcher matcher_;
};

}  // namespace kapitsa::runtime
