// GrammarBuilder (validation, UTF-8 expansion, flattening) and Grammar::to_string.
#include "text/grammar/grammar_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace kapitsa::text {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (same encoded length after the first split) into ranges whose UTF-8 encodings are
// byte-wise ranges: every byte position varies independently between lo's byte and hi's byte.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= boundary && boundary < hi) {
      split_utf8(lo, boundary, out);
      split_utf8(boundary + 1, hi, out);
      return;
    }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

std::string byte_class_string(const ByteSet& s) {
  auto show = [](int b) {
    if (b >= 0x21 && b < 0x7F && b != '\\' && b != ']' && b != '-' && b != '^') return std::string(1, static_cast<char>(b));
    return fmt::format("\\x{:02X}", b);
  };
  int count = 0;
  for (int b = 0; b < 256; ++b) count += s.has(static_cast<uint8_t>(b));
  if (count == 1)
    for (int b = 0; b < 256; ++b)
      if (s.has(static_cast<uint8_t>(b))) return "[" + show(b) + "]";
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    out += show(b);
    if (e > b) out += "-" + show(e);
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int32_t GrammarBuilder::rule(const std::string& name) {
  if (ids_.empty() && name != "root") rule("root");
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(names_.size());
  names_.push_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  ids_.emplace(name, id);
  return id;
}

int32_t GrammarBuilder::fresh_rule(const std::string& base) {
  for (;;) {
    const std::string name = fmt::format("{}_{}", base, ++fresh_counts_[base]);
    if (!ids_.contains(name)) return rule(name);
  }
}

void GrammarBuilder::define(int32_t rule, std::vector<Sequence> alternatives) {
  rules_[static_cast<size_t>(rule)] = std::move(alternatives);
  defined_[static_cast<size_t>(rule)] = true;
}

void GrammarBuilder::append_literal(std::string_view text, Sequence& out) {
  for (char c : text) {
    ByteSet s;
    s.add(static_cast<uint8_t>(c));
    out.push_back(Symbol::of_bytes(s));
  }
}

GrammarBuilder::Symbol GrammarBuilder::code_point_class(const CodeRanges& ranges, const std::string& base) {
  ByteSet ascii;
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> multi;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    // Surrogates are not characters: split them out.
    std::vector<std::pair<uint32_t, uint32_t>> parts;
    if (hi < 0xD800 || lo > 0xDFFF) parts.emplace_back(lo, hi);
    else {
      if (lo < 0xD800) parts.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) parts.emplace_back(0xE000, hi);
    }
    for (auto [a, b] : parts) {
      if (a < 0x80) {
        ascii.add_range(static_cast<uint8_t>(a), static_cast<uint8_t>(std::min<uint32_t>(b, 0x7F)));
        a = 0x80;
      }
      if (a <= b) split_utf8(a, b, multi);
    }
  }
  if (multi.empty()) return Symbol::of_bytes(ascii);
  std::vector<Sequence> alts;
  if (ascii != ByteSet{}) alts.push_back({Symbol::of_bytes(ascii)});
  // Sequences sharing all but the last byte range... are kept separate: few, and the DFA merges them.
  for (const auto& seq : multi) {
    Sequence s;
    for (auto [lo, hi] : seq) {
      ByteSet b;
      b.add_range(lo, hi);
      s.push_back(Symbol::of_bytes(b));
    }
    alts.push_back(std::move(s));
  }
  const int32_t r = fresh_rule(base);
  define(r, std::move(alts));
  return Symbol::of_rule(r);
}

Expected<std::shared_ptr<const Grammar>> GrammarBuilder::build() const {
  if (names_.empty() || !defined_[0]) return error("grammar: no 'root' rule");
  const size_t n = names_.size();
  for (size_t r = 0; r < n; ++r)
    if (!defined_[r]) return error("grammar: rule '{}' is used but never defined", names_[r]);
  // Nullable and productive rules (fixpoints).
  std::vector<bool> nullable(n, false), productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      for (const Sequence& alt : rules_[r]) {
        bool all_null = true, all_prod = true;
        for (const Symbol& s : alt) {
          if (!s.is_ref) {
            all_null = false;
            if (s.bytes == ByteSet{}) all_prod = false;
          } else {
            all_null = all_null && nullable[static_cast<size_t>(s.rule)];
            all_prod = all_prod && productive[static_cast<size_t>(s.rule)];
          }
        }
        if (all_null && !nullable[r]) nullable[r] = changed = true;
        if (all_prod && !productive[r]) productive[r] = changed = true;
      }
  }
  for (size_t r = 0; r < n; ++r)
    if (!productive[r]) return error("grammar: rule '{}' can never finish (every alternative recurses or matches nothing)", names_[r]);
  // Left recursion: a cycle through references reachable without consuming a byte.
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const Sequence& alt : rules_[r])
      for (const Symbol& s : alt) {
        if (!s.is_ref) break;
        left[r].push_back(s.rule);
        if (!nullable[static_cast<size_t>(s.rule)]) break;
      }
  std::vector<int> color(n, 0);
  std::string cycle;
  std::function<bool(size_t)> dfs = [&](size_t r) {
    color[r] = 1;
    for (int32_t t : left[r]) {
      if (color[static_cast<size_t>(t)] == 1) {
        cycle = names_[static_cast<size_t>(t)];
        return true;
      }
      if (color[static_cast<size_t>(t)] == 0 && dfs(static_cast<size_t>(t))) return true;
    }
    color[r] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r)
    if (color[r] == 0 && dfs(r))
      return error("grammar: rule '{}' is left-recursive (it can reach itself without reading a byte, e.g. a repetition of something that may be empty)", cycle);

  auto g = std::make_shared<Grammar>();
  std::map<std::array<uint64_t, 4>, int32_t> class_ids;
  g->rules_.resize(n);
  g->names_ = names_;
  for (size_t r = 0; r < n; ++r)
    for (const Sequence& alt : rules_[r]) {
      g->rules_[r].push_back(static_cast<int32_t>(g->elements_.size()));
      for (const Symbol& s : alt) {
        if (s.is_ref) {
          g->elements_.push_back({Grammar::Element::Kind::ref, s.rule});
          continue;
        }
        auto [it, fresh] = class_ids.emplace(s.bytes.bits, static_cast<int32_t>(g->classes_.size()));
        if (fresh) g->classes_.push_back(s.bytes);
        g->elements_.push_back({Grammar::Element::Kind::bytes, it->second});
      }
      g->elements_.push_back({Grammar::Element::Kind::end, 0});
    }
  return std::shared_ptr<const Grammar>(std::move(g));
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules_.size(); ++r) {
    out += names_[r] + " ::=";
    for (size_t a = 0; a < rules_[r].size(); ++a) {
      if (a > 0) out += " |";
      for (int32_t p = rules_[r][a]; elements_[static_cast<size_t>(p)].kind != Element::Kind::end; ++p) {
        const Element& e = elements_[static_cast<size_t>(p)];
        out += " ";
        out += e.kind == Element::Kind::ref ? names_[static_cast<size_t>(e.value)]
                                            : byte_class_string(classes_[static_cast<size_t>(e.value)]);
      }
      if (elements_[static_cast<size_t>(rules_[r][a])].kind == Element::Kind::end) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace kapitsa::text
