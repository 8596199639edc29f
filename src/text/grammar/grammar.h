// Grammar: an immutable byte-level context-free grammar, the input of constrained decoding. Rules are
// alternatives of sequences of byte classes (256-bit sets) and rule references; UTF-8 character
// classes are expanded into byte sequences when the grammar is built, so matching never decodes UTF-8.
// Invariants: every referenced rule exists, no rule is left-recursive (directly or through nullable
// prefixes), the root rule is rule 0. Shared between sequences as std::shared_ptr<const Grammar>.
#pragma once

#include "base/status.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text {

// Where the constrained part starts in the model's output, for models that reason first.
struct GrammarStart {
  bool in_reasoning = false;        // the prompt opened <think>: any text up to "</think>", then whitespace
  bool may_open_reasoning = false;  // an optional "<think>…</think>" block first
};

// A set of bytes.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

class Grammar {
 public:
  // One element of a flattened alternative: match a byte class, call a rule, or end the alternative.
  struct Element {
    enum class Kind : uint8_t { bytes, ref, end };
    Kind kind = Kind::end;
    int32_t value = 0;  // bytes: index into classes(); ref: rule id
  };

  // Every alternative of every rule, each terminated by an `end` element.
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<ByteSet>& classes() const { return classes_; }
  // Start positions (indices into elements()) of each alternative of rule `rule`.
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rules_[static_cast<size_t>(rule)]; }
  int32_t rule_count() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& rule_name(int32_t rule) const { return names_[static_cast<size_t>(rule)]; }
  static constexpr int32_t root() { return 0; }

  // A readable dump (one line per rule, byte classes as [..]) for tests and error reports.
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<ByteSet> classes_;
  std::vector<std::vector<int32_t>> rules_;
  std::vector<std::string> names_;
};

// Parses GBNF (llama.cpp's grammar format): `name ::= alternatives`, "literals" with \n \t \r \\ \"
// \xHH \uHHHH \UHHHHHHHH escapes, [character classes] with ranges and ^ negation, `.` (any character),
// ( ) grouping, | alternation, * + ? {m} {m,} {m,n} repetition, # comments. A rule may span lines.
// The grammar starts at `root`. Errors name line:col.
Expected<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view source);

// GBNF building blocks shared by the schema and tool-call converters (rules are appended to `out`).
// A GBNF string literal for `text` (quoted, escaped).
std::string gbnf_literal(std::string_view text);
// Rules `name` ::= any text (valid UTF-8) not containing `end` nor any of `forbidden`, then `end`.
// `also_excluded`: GBNF class items the text may not hold either (e.g. "\\\x00-\x1F"; must not
// overlap the characters of the literals); `escape`: a GBNF expression allowed anywhere in the text,
// which resets the search for the literals (e.g. a JSON escape).
std::string gbnf_text_until(const std::string& name, std::string_view end,
                            const std::vector<std::string>& forbidden = {}, std::string_view also_excluded = {},
                            std::string_view escape = {});
// The reasoning prefix for `start` as a rule `name` (may be the empty sequence ""), appended to out.
void gbnf_reasoning_prefix(const std::string& name, const GrammarStart& start, std::string& out);

}  // namespace kapitsa::text
