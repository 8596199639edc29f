// GBNF parser (llama.cpp's grammar text format) onto GrammarBuilder, and GBNF-writing helpers.
// Lenient where it is unambiguous: a rule may continue on the next line (a new rule starts at
// `name ::=`), and a leading `|` on a continuation line is fine.
#include "text/grammar/grammar_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace kapitsa::text {
namespace {

using Symbol = GrammarBuilder::Symbol;
using Sequence = GrammarBuilder::Sequence;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  Expected<std::shared_ptr<const Grammar>> parse() {
    skip_space();
    if (at_end()) return fail("empty grammar: expected 'root ::= ...'");
    while (!at_end()) {
      const size_t at = pos_;
      std::string name = parse_name();
      if (name.empty()) return fail("expected a rule name");
      skip_space();
      if (src_.substr(pos_, 3) != "::=") return fail(fmt::format("expected '::=' after rule name '{}'", name));
      pos_ += 3;
      const int32_t r = b_.rule(name);
      if (b_.defined(r)) return fail_at(at, fmt::format("rule '{}' is defined twice", name));
      first_use_.try_emplace(r, at);
      auto alts = parse_alternatives(false);
      if (!error_.empty()) return Error{error_};
      b_.define(r, std::move(*alts));
      skip_space();
    }
    for (const auto& [rule, at] : first_use_)
      if (!b_.defined(rule)) return fail_at(at, fmt::format("rule '{}' is not defined", b_.name(rule)));
    if (!b_.defined(0)) return fail_at(0, "no 'root' rule: the grammar starts at 'root ::= ...'");
    auto built = b_.build();
    if (!built.ok()) return Error{"gbnf: " + built.error().message};
    return built;
  }

 private:
  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') ++pos_;
      else if (c == '#') while (!at_end() && peek() != '\n') ++pos_;
      else break;
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(src_.substr(start, pos_ - start));
  }

  // Whether a new rule starts here (`name ::=`): ends the current rule's last sequence.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < src_.size() && is_name_char(src_[p])) ++p;
    if (p == pos_) return false;
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\r' || src_[p] == '\n')) ++p;
    return src_.substr(p, 3) == "::=";
  }

  std::optional<std::vector<Sequence>> parse_alternatives(bool nested) {
    std::vector<Sequence> alts;
    for (;;) {
      auto seq = parse_sequence(nested);
      if (!seq) return std::nullopt;
      alts.push_back(std::move(*seq));
      skip_space();
      if (peek() != '|') break;
      ++pos_;
    }
    return alts;
  }

  std::optional<Sequence> parse_sequence(bool nested) {
    Sequence seq;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (!nested && at_rule_start()) break;
      const size_t item_start = pos_;
      Sequence item;
      const char c = peek();
      if (c == '"') {
        ++pos_;
        std::string text;
        while (!at_end() && peek() != '"') {
          auto cp = parse_char();
          if (!cp) return std::nullopt;
          append_utf8(*cp, text);
        }
        if (at_end()) return fail_opt(item_start, "unterminated string literal");
        ++pos_;
        GrammarBuilder::append_literal(text, item);
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (peek() == '^') {
          negate = true;
          ++pos_;
        }
        GrammarBuilder::CodeRanges ranges;
        while (!at_end() && peek() != ']') {
          auto lo = parse_char();
          if (!lo) return std::nullopt;
          uint32_t hi = *lo;
          if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
            ++pos_;
            auto h = parse_char();
            if (!h) return std::nullopt;
            hi = *h;
            if (hi < *lo) return fail_opt(item_start, "character range is reversed");
          }
          ranges.emplace_back(*lo, hi);
        }
        if (at_end()) return fail_opt(item_start, "unterminated character class");
        ++pos_;
        if (negate) ranges = complement(ranges);
        if (ranges.empty()) return fail_opt(item_start, "character class matches nothing");
        item.push_back(b_.code_point_class(ranges, "class"));
      } else if (c == '.') {
        ++pos_;
        item.push_back(b_.code_point_class({{0, 0x10FFFF}}, "any"));
      } else if (c == '(') {
        ++pos_;
        auto alts = parse_alternatives(true);
        if (!alts) return std::nullopt;
        skip_space();
        if (peek() != ')') return fail_opt(item_start, "'(' is never closed");
        ++pos_;
        if (alts->size() == 1) item = std::move((*alts)[0]);
        else {
          const int32_t r = b_.fresh_rule("group");
          b_.define(r, std::move(*alts));
          item.push_back(Symbol::of_rule(r));
        }
      } else if (is_name_char(c)) {
        const std::string name = parse_name();
        const int32_t r = b_.rule(name);
        first_use_.try_emplace(r, item_start);
        item.push_back(Symbol::of_rule(r));
      } else {
        return fail_opt(pos_, fmt::format("unexpected character '{}'", c));
      }
      // Postfix operators (no space allowed before them, as in llama.cpp; a space is tolerated).
      for (;;) {
        const size_t op_at = pos_;
        const char op = peek();
        int lo = 0, hi = -1;  // hi -1: unbounded
        if (op == '*') ++pos_;
        else if (op == '+') { lo = 1; ++pos_; }
        else if (op == '?') { hi = 1; ++pos_; }
        else if (op == '{') {
          ++pos_;
          auto m = parse_int();
          if (!m) return fail_opt(op_at, "expected a number after '{'");
          lo = *m;
          hi = *m;
          if (peek() == ',') {
            ++pos_;
            skip_space();
            if (peek() == '}') hi = -1;
            else {
              auto n = parse_int();
              if (!n) return fail_opt(op_at, "expected a number or '}' after ','");
              hi = *n;
            }
          }
          skip_space();
          if (peek() != '}') return fail_opt(op_at, "expected '}'");
          ++pos_;
          if (hi >= 0 && hi < lo) return fail_opt(op_at, "repetition {m,n} with n < m");
          if (lo > 10000 || hi > 10000) return fail_opt(op_at, "repetition count above 10000");
        } else break;
        item = repeat(std::move(item), lo, hi);
      }
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  std::optional<int> parse_int() {
    skip_space();
    int v = 0, digits = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9' && digits < 9) {
      v = v * 10 + (peek() - '0');
      ++pos_;
      ++digits;
    }
    skip_space();
    if (digits == 0) return std::nullopt;
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  std::optional<uint32_t> parse_char() {
    const size_t at = pos_;
    const auto c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return static_cast<uint32_t>(e);
        case 'x': return parse_hex(2, at);
        case 'u': return parse_hex(4, at);
        case 'U': return parse_hex(8, at);
        default: fail_at(at, fmt::format("unknown escape '\\{}'", e)); return std::nullopt;
      }
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > src_.size()) {
      fail_at(at, "invalid UTF-8 in the grammar");
      return std::nullopt;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(src_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) {
        fail_at(at, "invalid UTF-8 in the grammar");
        return std::nullopt;
      }
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  std::optional<uint32_t> parse_hex(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) {
        fail_at(at, fmt::format("expected {} hex digits in the escape", digits));
        return std::nullopt;
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) {
      fail_at(at, "escape is above U+10FFFF");
      return std::nullopt;
    }
    return v;
  }

  static GrammarBuilder::CodeRanges complement(GrammarBuilder::CodeRanges r) {
    std::sort(r.begin(), r.end());
    GrammarBuilder::CodeRanges out;
    uint32_t next = 0;
    for (auto [lo, hi] : r) {
      if (lo > next) out.emplace_back(next, lo - 1);
      next = std::max(next, hi + 1);
    }
    if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
    return out;
  }

  // item{lo,hi} (hi −1: unbounded) as a sequence, through fresh rules.
  Sequence repeat(Sequence item, int lo, int hi) {
    Symbol one;
    if (item.size() == 1) one = item[0];
    else {
      const int32_t r = b_.fresh_rule("item");
      b_.define(r, {std::move(item)});
      one = Symbol::of_rule(r);
    }
    Sequence out(static_cast<size_t>(lo), one);
    if (hi < 0) {
      const int32_t star = b_.fresh_rule("star");
      b_.define(star, {{one, Symbol::of_rule(star)}, {}});
      out.push_back(Symbol::of_rule(star));
    } else if (hi > lo) {
      // opt_k ::= one opt_{k-1} | ""  (nested, so at most hi − lo more)
      int32_t inner = -1;
      for (int k = 0; k < hi - lo; ++k) {
        const int32_t r = b_.fresh_rule("opt");
        Sequence body{one};
        if (inner >= 0) body.push_back(Symbol::of_rule(inner));
        b_.define(r, {std::move(body), {}});
        inner = r;
      }
      out.push_back(Symbol::of_rule(inner));
    }
    return out;
  }

  std::pair<int, int> line_col(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }
  Error fail_at(size_t at, const std::string& message) {
    if (error_.empty()) {
      auto [line, col] = line_col(at);
      error_ = fmt::format("gbnf:{}:{}: {}", line, col, message);
    }
    return Error{error_};
  }
  Error fail(const std::string& message) { return fail_at(pos_, message); }
  std::nullopt_t fail_opt(size_t at, const std::string& message) {
    fail_at(at, message);
    return std::nullopt;
  }

  std::string_view src_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::map<int32_t, size_t> first_use_;  // rule → where it was first named
  std::string error_;
};

}  // namespace

Expected<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view source) { return Parser(source).parse(); }

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02X}", c);
    else out += ch;
  }
  return out + "\"";
}

namespace {
// A GBNF class item for one code point.
std::string class_char(uint32_t cp) {
  if (cp == ']' || cp == '\\' || cp == '^' || cp == '-' || cp == '"' || cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  std::string s;
  append_utf8(cp, s);
  return s;
}
}  // namespace

namespace {
std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n && i + static_cast<size_t>(k) < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + static_cast<size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}
}  // namespace

std::string gbnf_text_until(const std::string& name, std::string_view end, const std::vector<std::string>& forbidden,
                            std::string_view also_excluded, std::string_view escape) {
  // Aho-Corasick automaton over the code points of `end` and `forbidden`: one rule per automaton
  // state; a character completing `end` finishes, one completing a forbidden string is left out.
  std::vector<std::vector<uint32_t>> words{code_points(end)};
  for (const std::string& f : forbidden) words.push_back(code_points(f));
  if (words[0].empty()) return fmt::format("{} ::= \"\"\n", name);
  struct Node {
    std::map<uint32_t, int> go;
    int fail = 0;
    int word = -1;  // a word ends here (itself or through a suffix): 0 = end, > 0 forbidden
  };
  std::vector<Node> t(1);
  std::set<uint32_t> alphabet;
  for (size_t w = 0; w < words.size(); ++w) {
    int s = 0;
    for (uint32_t c : words[w]) {
      alphabet.insert(c);
      auto it = t[static_cast<size_t>(s)].go.find(c);
      if (it == t[static_cast<size_t>(s)].go.end()) {
        t.push_back({});
        it = t[static_cast<size_t>(s)].go.emplace(c, static_cast<int>(t.size()) - 1).first;
      }
      s = it->second;
    }
    if (t[static_cast<size_t>(s)].word < 0 || static_cast<int>(w) < t[static_cast<size_t>(s)].word) t[static_cast<size_t>(s)].word = static_cast<int>(w);
  }
  // Breadth-first failure links; delta(s, c) completed for the alphabet.
  std::vector<std::map<uint32_t, int>> delta(t.size());
  std::vector<int> queue{0};
  for (size_t q = 0; q < queue.size(); ++q) {
    const int s = queue[q];
    for (uint32_t c : alphabet) {
      auto it = t[static_cast<size_t>(s)].go.find(c);
      if (it != t[static_cast<size_t>(s)].go.end()) {
        const int child = it->second;
        t[static_cast<size_t>(child)].fail = s == 0 ? 0 : delta[static_cast<size_t>(t[static_cast<size_t>(s)].fail)][c];
        const int fw = t[static_cast<size_t>(t[static_cast<size_t>(child)].fail)].word;
        if (fw >= 0 && (t[static_cast<size_t>(child)].word < 0 || fw < t[static_cast<size_t>(child)].word)) t[static_cast<size_t>(child)].word = fw;
        delta[static_cast<size_t>(s)][c] = child;
        queue.push_back(child);
      } else {
        delta[static_cast<size_t>(s)][c] = s == 0 ? 0 : delta[static_cast<size_t>(t[static_cast<size_t>(s)].fail)][c];
      }
    }
  }
  auto state = [&](int i) { return i == 0 ? name : fmt::format("{}-{}", name, i); };
  std::string others = "[^";
  for (uint32_t c : alphabet) others += class_char(c);
  others += std::string(also_excluded) + "]";
  const std::string reset = escape.empty() ? std::string() : fmt::format(" | {} {}", escape, state(0));
  std::string out;
  for (size_t s = 0; s < t.size(); ++s) {
    if (t[s].word >= 0) continue;  // a completed word: never a state to continue from
    std::string alts;
    for (uint32_t c : alphabet) {
      const int to = delta[s][c];
      std::string ch;
      append_utf8(c, ch);
      if (t[static_cast<size_t>(to)].word == 0) alts += fmt::format(" | {}", gbnf_literal(ch));
      else if (t[static_cast<size_t>(to)].word < 0) alts += fmt::format(" | {} {}", gbnf_literal(ch), state(to));
    }
    out += fmt::format("{} ::= {} {}{}{}\n", state(static_cast<int>(s)), others, state(0), reset, alts);
  }
  return out;
}

void gbnf_reasoning_prefix(const std::string& name, const GrammarStart& start, std::string& out) {
  if (start.in_reasoning) {
    out += gbnf_text_until(name + "-think", "</think>");
    out += fmt::format("{} ::= {}-think {}-ws\n{}-ws ::= [ \\t\\r\\n]{{0,4}}\n", name, name, name, name);
  } else if (start.may_open_reasoning) {
    out += gbnf_text_until(name + "-think", "</think>");
    out += fmt::format("{} ::= (\"<think>\" {}-think {}-ws)?\n{}-ws ::= [ \\t\\r\\n]{{0,4}}\n", name, name, name, name);
  } else {
    out += fmt::format("{} ::= \"\"\n", name);
  }
}

}  // namespace kapitsa::text
