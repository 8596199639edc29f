// Python str semantics over UTF-8 (see pystr.h).
#include "text/jinja/pystr.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstring>

namespace kapitsa::text::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: one replacement character per byte
      out.push_back(0xFFFD);
      n = 1;
    } else {
      out.push_back(static_cast<char32_t>(cp));
    }
    p += n;
    left -= n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x110000) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    utf8_append(out, 0xFFFD);
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  bool ascii = true;
  for (unsigned char c : s) ascii &= c < 0x80;
  return ascii ? s.size() : utf8_decode(s).size();
}

static utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool py_isspace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return true;
  if (c < 0x80) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}

bool py_isdigit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return category(c) == UTF8PROC_CATEGORY_ND;
}

bool py_isalnum(char32_t c) {
  if (py_isalpha(c)) return true;
  if (c < 0x80) return c >= '0' && c <= '9';
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

char32_t py_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t py_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
bool py_is_cased_upper(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT;
}
bool py_is_cased_lower(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LL; }
static bool is_cased(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  // Works on the UTF-8 bytes, decoding only the code points at the two ends (strip is hot: chat
  // templates trim every message). Invalid bytes count as U+FFFD and are kept as they are.
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      utf8proc_int32_t cp = 0;
      utf8proc_ssize_t n = utf8proc_iterate(data + b, static_cast<utf8proc_ssize_t>(e - b), &cp);
      if (n <= 0) { cp = 0xFFFD; n = 1; }
      if (!strip_it(static_cast<char32_t>(cp))) break;
      b += static_cast<size_t>(n);
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && e - start < 4 && (data[start] & 0xC0) == 0x80) --start;
      utf8proc_int32_t cp = 0;
      utf8proc_ssize_t n = utf8proc_iterate(data + start, static_cast<utf8proc_ssize_t>(e - start), &cp);
      if (n <= 0 || static_cast<size_t>(n) != e - start) {  // not one whole code point: the last byte alone
        start = e - 1;
        cp = 0xFFFD;
      }
      if (!strip_it(static_cast<char32_t>(cp))) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0, n = u.size();
  while (true) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(u[e - 1])) --e;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(u[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = utf8_decode(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(u[b])) ++b;
        out.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
  }
  return {out.rbegin(), out.rend()};
}

static bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < u.size()) {
    if (is_line_break(u[i])) {
      out.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start)));
      if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      start = ++i;
    } else {
      ++i;
    }
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement around every code point
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) { out += replacement; ++done; }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(replacement);
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

// Python's full (multi-character) upper-case mappings for the characters templates meet most:
// German sharp s and the Latin ligatures. Everything else maps one to one.
static const char* special_upper(char32_t c) {
  switch (c) {
    case 0xDF: return "SS";
    case 0xFB00: return "FF";
    case 0xFB01: return "FI";
    case 0xFB02: return "FL";
    case 0xFB03: return "FFI";
    case 0xFB04: return "FFL";
    case 0xFB05: case 0xFB06: return "ST";
    case 0x149: return "\xCA\xBCN";
    default: return nullptr;
  }
}

std::string py_upper(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (const char* sp = special_upper(c)) out += sp;
    else utf8_append(out, py_upper(c));
  }
  return out;
}
std::string py_lower(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0x130) out += "i\xCC\x87";  // İ lower-cases to i + combining dot above
    else utf8_append(out, py_lower(c));
  }
  return out;
}
std::string py_swapcase(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) utf8_append(out, py_is_cased_upper(c) ? py_lower(c) : py_upper(c));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    char32_t t = prev_cased ? py_lower(c) : static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
    utf8_append(out, t);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i)
    utf8_append(out, i == 0 ? static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(u[0])))
                            : py_lower(u[i]));
  return out;
}

std::string py_repr(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool has_single = false, has_double = false;
  for (char32_t c : u) {
    has_single |= c == '\'';
    has_double |= c == '"';
  }
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c)) {
      utf8_append(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  } else if (exp >= 0) {
    if (digits.size() <= static_cast<size_t>(exp) + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out += "0." + std::string(-exp - 1, '0') + digits;
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace kapitsa::text::jinja
