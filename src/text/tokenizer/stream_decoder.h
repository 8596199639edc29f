// StreamDecoder: turns generated token ids into text as they arrive. It emits only complete UTF-8
// characters, holding back the bytes of a character split across tokens, and replaces invalid runs
// with U+FFFD exactly as a whole decode would — so the concatenation of everything push() and
// finish() return equals Tokenizer::decode of all the ids. Not thread-safe (one per sequence).
#pragma once

#include "text/tokenizer/tokenizer.h"

#include <string>

namespace kapitsa::text {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Text completed by this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held (an unfinished character becomes U+FFFD); the decoder is then empty.
  std::string finish();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace kapitsa::text
