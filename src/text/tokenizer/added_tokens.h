// Added tokens (tokenizer.json "added_tokens"): found in raw text before normalization and
// pre-tokenization, leftmost-longest, honouring lstrip / rstrip / single_word. Special ones can be
// excluded (then they are ordinary text). Tokens with normalized=true are matched on the raw text too
// (HF matches them after normalizing; identical for ASCII tokens, which is what models use).
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  struct Match {
    size_t start = 0, end = 0;  // bytes of the text the token covers (incl. stripped whitespace)
    int32_t id = -1;
  };

  static Expected<std::vector<AddedToken>> parse(const Json& list, const std::string& where);
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens = {});

  // The leftmost-longest match at or after `from`; false when none.
  bool find(std::string_view text, size_t from, bool allow_special, Match& match) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // token indices, longest content first
};

}  // namespace kapitsa::text
