// Unicode normalization through utf8proc; pure-ASCII text is already in every normal form.
#include "text/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace kapitsa::text {
namespace {

Status add_steps(const Json& spec, const std::string& where, std::vector<Normalizer::Step>& steps) {
  if (spec.is_null()) return ok_status();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    return error("{}: expected an object with a \"type\"", where);
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array())
      return error("{}.normalizers: expected an array", where);
    for (size_t i = 0; i < spec["normalizers"].size(); ++i)
      KAPITSA_RETURN_IF_ERROR(add_steps(spec["normalizers"][i], fmt::format("{}.normalizers[{}]", where, i), steps));
    return ok_status();
  }
  if (type == "NFC") steps.push_back(Normalizer::Step::nfc);
  else if (type == "NFD") steps.push_back(Normalizer::Step::nfd);
  else if (type == "NFKC") steps.push_back(Normalizer::Step::nfkc);
  else if (type == "NFKD") steps.push_back(Normalizer::Step::nfkd);
  else if (type == "Lowercase") steps.push_back(Normalizer::Step::lowercase);
  else return error("{}: unsupported normalizer type \"{}\"", where, type);
  return ok_status();
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::string map(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) {  // invalid UTF-8 or out of memory: leave the text as it is rather than lose it
    std::free(out);
    return std::string(text);
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// Per code point simple lowercase (Rust's to_lowercase differs only for a few context-dependent letters).
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t c;
    const auto n = utf8proc_iterate(p, left, &c);
    if (n <= 0) return std::string(text);
    utf8proc_uint8_t buf[4];
    const auto m = utf8proc_encode_char(utf8proc_tolower(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
    p += n;
    left -= n;
  }
  return out;
}

// True when NFC can neither change c nor combine it with a neighbour: a starter with no decomposition
// that takes part in no composition (CJK, Hangul syllables, most symbols and emoji). Conservative: a
// false "no" only sends text through utf8proc.
bool nfc_inert(utf8proc_int32_t c) {
  if (c < 0x80) return true;
  if ((c >= 0x1100 && c <= 0x11FF) || (c >= 0xA960 && c <= 0xA97F) || (c >= 0xD7B0 && c <= 0xD7FF))
    return false;  // conjoining jamo compose algorithmically
  const utf8proc_property_t* p = utf8proc_get_property(c);
  return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && p->comb_index == UINT16_MAX &&
         p->category != UTF8PROC_CATEGORY_MN && p->category != UTF8PROC_CATEGORY_MC &&
         p->category != UTF8PROC_CATEGORY_ME;
}

// NFC that only runs utf8proc over windows around non-inert characters. A window starts at the last
// ASCII character before (a starter that may compose with what follows) and ends before the next
// ASCII character: nothing composes or reorders across an ASCII starter, so windows are independent.
std::string nfc(std::string_view text) {
  std::string out;
  size_t copied = 0;     // text[0, copied) is already in out
  size_t last_ascii = 0; // position of the latest ASCII character seen (window start)
  const auto* base = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      last_ascii = i++;
      continue;
    }
    utf8proc_int32_t c = -1;
    const auto n = utf8proc_iterate(base + i, static_cast<utf8proc_ssize_t>(text.size() - i), &c);
    if (n <= 0) return map(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE);  // invalid UTF-8: let utf8proc decide
    if (nfc_inert(c)) {
      i += static_cast<size_t>(n);
      continue;
    }
    const size_t start = std::max(copied, last_ascii);
    size_t end = i + static_cast<size_t>(n);
    while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
    if (out.empty()) out.reserve(text.size());
    out.append(text.substr(copied, start - copied));
    out += map(text.substr(start, end - start), UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    copied = end;
    i = end;
  }
  if (copied == 0) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

}  // namespace

Expected<Normalizer> Normalizer::from_json(const Json& spec, const std::string& where) {
  Normalizer n;
  KAPITSA_RETURN_IF_ERROR(add_steps(spec, where, n.steps_));
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (Step step : steps_) {
    if (step == Step::lowercase) {
      if (is_ascii(s)) {
        for (char& c : s)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      } else {
        s = lowercase(s);
      }
      continue;
    }
    if (is_ascii(s)) continue;
    switch (step) {
      case Step::nfc: s = nfc(s); break;
      case Step::nfd: s = map(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case Step::nfkc: s = map(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case Step::nfkd: s = map(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      default: break;
    }
  }
  return s;
}

}  // namespace kapitsa::text
