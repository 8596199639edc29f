// GrammarBuilder: assembles a Grammar from rules given as alternatives of symbol sequences, expands
// Unicode code-point ranges into UTF-8 byte sequences, and validates the result (every rule defined,
// productive, none left-recursive). Internal to text/grammar: front ends (the GBNF parser) use it.
#pragma once

#include "text/grammar/grammar.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::text {

class GrammarBuilder {
 public:
  struct Symbol {
    bool is_ref = false;
    ByteSet bytes;     // !is_ref
    int32_t rule = 0;  // is_ref
    static Symbol of_bytes(const ByteSet& s) { return Symbol{false, s, 0}; }
    static Symbol of_rule(int32_t r) { return Symbol{true, {}, r}; }
  };
  using Sequence = std::vector<Symbol>;
  using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code-point ranges

  // The rule named `name`, created (undefined) on first use. "root" is always rule 0.
  int32_t rule(const std::string& name);
  // A fresh rule named after `base` (base_1, base_2, …).
  int32_t fresh_rule(const std::string& base);
  bool defined(int32_t rule) const { return defined_[static_cast<size_t>(rule)]; }
  void define(int32_t rule, std::vector<Sequence> alternatives);
  const std::string& name(int32_t rule) const { return names_[static_cast<size_t>(rule)]; }

  // The UTF-8 bytes of `text`, one symbol per byte.
  static void append_literal(std::string_view text, Sequence& out);
  // One symbol matching any code point of `ranges` (surrogates excluded): a byte class when every code
  // point is ASCII, otherwise a fresh rule (named after `base`) with one alternative per byte pattern.
  Symbol code_point_class(const CodeRanges& ranges, const std::string& base);

  // Validates and flattens. Names the rule at fault on error.
  Expected<std::shared_ptr<const Grammar>> build() const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, int> fresh_counts_;
};

// UTF-8 encoding of one code point (no validation beyond the 4-byte range).
void append_utf8(uint32_t cp, std::string& out);

}  // namespace kapitsa::text
