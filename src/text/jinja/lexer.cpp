// Lexer (see lexer.h). Mirrors jinja2/lexer.py: the root state finds the next tag and applies
// `-`/`+` and lstrip_blocks to the text before it; inside a tag, an end marker only counts when no
// bracket is open (so `{{ {'a': {'b': 1}} }}` lexes), and `%}`/`#}` eat one following newline.
#include "text/jinja/lexer.h"

#include "text/jinja/error.h"
#include "text/jinja/pystr.h"

#include <algorithm>
#include <cstring>

namespace kapitsa::text::jinja {

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\r') {
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(c);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.rstrip() on UTF-8 text.
std::string rstrip_text(std::string_view s) { return py_strip(s, std::nullopt, false, true); }

bool all_space_no_newline(std::string_view s) {
  for (char32_t c : utf8_decode(s))
    if (!py_isspace(c) || c == '\n') return false;
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text(src_.substr(pos, (tag == npos ? src_.size() : tag) - pos));
      if (tag == npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char kind = src_[tag + 1];
      char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod != '-' && mod != '+') mod = '\0';
      if (mod == '-') {
        text = rstrip_text(text);
      } else if (mod == '\0' && kind != '{') {  // lstrip_blocks: only blocks and comments
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && all_space_no_newline(std::string_view(text).substr(l_pos)))
          text.resize(l_pos);
      }
      emit_text(std::move(text), pos);
      size_t body = tag + 2 + (mod ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, body, line_starting);
      } else if (kind == '%' && lex_raw(tag, body, pos, line_starting)) {
        // raw block handled
      } else {
        pos = lex_tag(tag, body, kind == '%', line_starting);
      }
    }
    tokens_.push_back(make(Tok::Eof, src_.size()));
    return std::move(tokens_);
  }

 private:
  static constexpr size_t npos = std::string_view::npos;

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return npos;
  }

  void position(size_t offset, int& line, int& col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    line = static_cast<int>(it - line_starts_.begin());
    col = static_cast<int>(offset - *(it - 1)) + 1;
  }

  Token make(Tok type, size_t offset, std::string value = {}) const {
    Token t{type, std::move(value)};
    position(offset, t.line, t.col);
    return t;
  }

  [[noreturn]] void error_at(size_t offset, const std::string& message) const {
    int line, col;
    position(offset, line, col);
    throw TemplateError(message, line, col);
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(make(Tok::Text, offset, std::move(text)));
  }

  // After an end marker: `-` strips all following whitespace, plain `%}`/`#}` eat one newline.
  size_t after_end(size_t pos, char mod, bool trim_newline, bool& line_starting) {
    if (mod == '-') {
      std::u32string rest;  // strip Unicode whitespace like Jinja's `\s*`
      size_t p = pos;
      while (p < src_.size()) {
        if (is_ascii_space(src_[p])) { ++p; continue; }
        unsigned char c = static_cast<unsigned char>(src_[p]);
        if (c < 0x80) break;
        size_t len = (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : (c >= 0xC0) ? 2 : 1;
        std::u32string cp = utf8_decode(src_.substr(p, len));
        if (cp.size() != 1 || !py_isspace(cp[0])) break;
        p += len;
      }
      line_starting = p > pos && src_[p - 1] == '\n';
      return p;
    }
    if (mod == '\0' && trim_newline && pos < src_.size() && src_[pos] == '\n') {
      line_starting = true;
      return pos + 1;
    }
    line_starting = false;
    return pos;
  }

  size_t lex_comment(size_t tag, size_t body, bool& line_starting) {
    for (size_t p = body; p + 1 < src_.size(); ++p) {
      if (src_[p] == '+' && src_.compare(p + 1, 2, "#}") == 0) return after_end(p + 3, '+', true, line_starting);
      if (src_[p] == '-' && src_.compare(p + 1, 2, "#}") == 0) return after_end(p + 3, '-', true, line_starting);
      if (src_[p] == '#' && src_[p + 1] == '}') return after_end(p + 2, '\0', true, line_starting);
    }
    error_at(tag, "missing end of comment tag");
  }

  // `{% raw %}...{% endraw %}`: the body is text, untouched.
  bool lex_raw(size_t tag, size_t body, size_t& pos, bool& line_starting) {
    size_t p = body;
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    char mod = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) mod = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    size_t start = after_end(p + 2, mod, true, line_starting);
    for (size_t q = src_.find("{%", start); q != npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char open_mod = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) open_mod = src_[r++];
      while (r < src_.size() && is_ascii_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_ascii_space(src_[r])) ++r;
      char end_mod = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_mod = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string text(src_.substr(start, q - start));
      if (open_mod == '-') {
        text = rstrip_text(text);
      } else if (open_mod == '\0') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 && all_space_no_newline(std::string_view(text).substr(l_pos))) text.resize(l_pos);
      }
      emit_text(std::move(text), start);
      pos = after_end(r + 2, end_mod, true, line_starting);
      return true;
    }
    error_at(tag, "missing end of raw directive");
  }

  size_t lex_tag(size_t tag, size_t body, bool block, bool& line_starting) {
    tokens_.push_back(make(block ? Tok::BlockBegin : Tok::VarBegin, tag));
    int depth = 0;
    size_t p = body;
    while (true) {
      while (p < src_.size() && is_ascii_space(src_[p])) ++p;
      if (p >= src_.size()) error_at(tag, block ? "unexpected end of template, expected '%}'"
                                               : "unexpected end of template, expected '}}'");
      if (depth == 0) {
        const char* end = block ? "%}" : "}}";
        if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, end) == 0) {
          tokens_.push_back(make(block ? Tok::BlockEnd : Tok::VarEnd, p));
          return after_end(p + 3, src_[p], block, line_starting);
        }
        if (src_.compare(p, 2, end) == 0) {
          tokens_.push_back(make(block ? Tok::BlockEnd : Tok::VarEnd, p));
          return after_end(p + 2, '\0', block, line_starting);
        }
      }
      char c = src_[p];
      if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else if (c >= '0' && c <= '9') {
        p = lex_number(p);
      } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t e = p;
        while (e < src_.size() && (src_[e] == '_' || std::isalnum(static_cast<unsigned char>(src_[e])))) ++e;
        tokens_.push_back(make(Tok::Name, p, std::string(src_.substr(p, e - p))));
        p = e;
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~()[]{}<>=.:|,;", c) || c == '\0')
            error_at(p, fmt::format("unexpected character '{}'", c == '\0' ? std::string("\\0") : std::string(1, c)));
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back(make(Tok::Op, p, op));
        p += op.size();
      }
    }
  }

  size_t lex_string(size_t start) {
    char quote = src_[start];
    std::string out;
    size_t p = start + 1;
    while (true) {
      if (p >= src_.size()) error_at(start, "unexpected end of string");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) error_at(start, "unexpected end of string");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t i = 0; i < len; ++i, ++p) {
            char h = p < src_.size() ? src_[p] : '\0';
            int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) error_at(start, fmt::format("truncated \\{} escape in string", e));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF) error_at(start, "illegal Unicode character in string");
          utf8_append(out, (cp >= 0xD800 && cp <= 0xDFFF) ? 0xFFFD : cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p)
              cp = cp * 8 + static_cast<uint32_t>(src_[p] - '0');
            utf8_append(out, cp);
          } else {  // unknown escapes stay as written (Python keeps the backslash)
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    tokens_.push_back(make(Tok::String, start, std::move(out)));
    return p + 1;
  }

  size_t lex_number(size_t start) {
    // 0x / 0o / 0b integers (underscores allowed between digits)
    if (src_[start] == '0' && start + 2 < src_.size() && std::strchr("xXoObB", src_[start + 1])) {
      char kind = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[start + 1])));
      int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
      auto digit = [&](char c) {
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;
        return d < base ? d : -1;
      };
      size_t p = start + 2;
      int64_t v = 0;
      bool any = false;
      while (p < src_.size()) {
        if (src_[p] == '_' && p + 1 < src_.size() && digit(src_[p + 1]) >= 0) { ++p; continue; }
        int d = digit(src_[p]);
        if (d < 0) break;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
          error_at(start, "integer literal too large");
        any = true;
        ++p;
      }
      if (any) {
        Token t = make(Tok::Int, start, std::string(src_.substr(start, p - start)));
        t.int_value = v;
        tokens_.push_back(std::move(t));
        return p;
      }
    }
    auto digits = [&](size_t p) {  // \d+(_\d+)*
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[p + 1])))))
        ++p;
      return p;
    };
    size_t p = digits(start);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      p = digits(p + 1);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        p = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = start; i < p; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    Token t = make(is_float ? Tok::Float : Tok::Int, start, text);
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      int64_t v = 0;
      for (char c : text) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v))
          error_at(start, "integer literal too large");
      }
      t.int_value = v;
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  std::string_view src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace kapitsa::text::jinja
