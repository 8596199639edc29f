// PromptEncoder: encodes prompts that mostly repeat an earlier one — an agent sends its whole
// conversation every turn — in time proportional to what changed. It keeps recent prompts with their
// ids and added-token splits (Tokenizer::Split); a new prompt reuses the ids of the longest prefix it
// shares with one of them, up to the last split inside that prefix (e.g. the "<|im_start|>" of the
// first turn that differs: the text before an added token encodes alone), and encodes only the rest.
// The ids always equal Tokenizer::encode's (allow_special, no add_special: a rendered chat prompt).
// Keeps the last `entries` prompts, least recently used going first. Thread-safe.
#pragma once

#include "text/tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

class PromptEncoder {
 public:
  explicit PromptEncoder(std::shared_ptr<const Tokenizer> tokenizer, size_t entries = 16);

  struct Encoded {
    std::vector<int32_t> ids;
    std::vector<Tokenizer::Split> splits;  // of the whole text
    size_t reused_ids = 0;                 // taken from an earlier prompt, not encoded again
  };
  // Encodes `text` (and remembers it for the prompts that follow).
  Encoded encode(std::string_view text);

  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  struct Entry {
    std::string text;
    std::vector<int32_t> ids;
    std::vector<Tokenizer::Split> splits;
  };
  std::shared_ptr<const Tokenizer> tokenizer_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::shared_ptr<const Entry>> entries_;  // most recently used first
};

}  // namespace kapitsa::text
