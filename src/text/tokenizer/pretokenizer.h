// The tokenizer.json "pre_tokenizer": splits normalized text into pieces that BPE encodes one by one.
// Supports Split (Regex or String pattern, every behaviour, invert), ByteLevel (its GPT-2 regex when
// use_regex, add_prefix_space) and Sequence. Regexes are taken verbatim from the file and run by PCRE2
// with UTF + UCP (Unicode \p{..}, \s), JIT-compiled. Pieces are views into the caller's text; input
// must be valid UTF-8. It does not do the byte→character mapping (BPE starts from bytes directly).
#pragma once

#include "base/json.h"
#include "base/status.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

class PreTokenizer {
 public:
  enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

  static Expected<PreTokenizer> from_json(const Json& spec, const std::string& where);

  // Appends the pieces of `text` (views into it) to `out`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // ByteLevel with add_prefix_space: the caller prepends ' ' to a segment that does not start with one.
  bool add_prefix_space() const { return add_prefix_space_; }
  // Whether a ByteLevel step was present (required by the byte-level BPE model).
  bool byte_level() const { return byte_level_; }

 private:
  struct Regex;  // a compiled PCRE2 pattern
  struct Step {
    std::shared_ptr<const Regex> regex;
    Behavior behavior = Behavior::isolated;
    bool invert = false;
  };
  static Status add_steps(const Json& spec, const std::string& where, PreTokenizer& p, bool first);
  static void apply(const Step& step, std::string_view piece, std::vector<std::string_view>& out);

  std::vector<Step> steps_;
  bool add_prefix_space_ = false;
  bool byte_level_ = false;
};

}  // namespace kapitsa::text
