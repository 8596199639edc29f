// UTF-8 scanning per the Unicode "maximal subpart" practice (see utf8.h).
#include "text/tokenizer/utf8.h"

#include <cstdint>

namespace kapitsa::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Result of looking at the sequence that starts at in[i]: `length` bytes form a valid character
// (ok), or the first `length` bytes are a maximal invalid subpart (!ok), or the input ended inside a
// valid-so-far sequence (incomplete).
struct Step {
  size_t length;
  bool ok;
  bool incomplete;
};

Step step(std::string_view in, size_t i) {
  const auto b0 = static_cast<uint8_t>(in[i]);
  if (b0 < 0x80) return {1, true, false};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= in.size()) return {k, false, true};
    const auto b = static_cast<uint8_t>(in[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {k, false, false};
  }
  return {need + 1, true, false};
}

}  // namespace

size_t utf8_append_lossy(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  size_t run = 0;  // start of the pending run of valid bytes, copied in one go
  while (i < in.size()) {
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step s = step(in, i);
    if (s.ok) {
      i += s.length;
      continue;
    }
    out.append(in.data() + run, i - run);
    if (s.incomplete && !final) return i;
    out += kReplacement;
    i += s.length;
    run = i;
  }
  out.append(in.data() + run, i - run);
  return i;
}

std::string utf8_lossy(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  utf8_append_lossy(in, out, true);
  return out;
}

bool utf8_is_valid(std::string_view in) {
  for (size_t i = 0; i < in.size();) {
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step s = step(in, i);
    if (!s.ok) return false;
    i += s.length;
  }
  return true;
}

size_t utf8_incomplete_tail(std::string_view in) {
  const size_t start = in.size() > 3 ? in.size() - 3 : 0;
  for (size_t i = start; i < in.size(); ++i) {
    const auto b = static_cast<uint8_t>(in[i]);
    if (b < 0x80 || (b & 0xC0) == 0x80) continue;  // not a lead byte
    const Step s = step(in, i);
    if (s.incomplete) return in.size() - i;
  }
  return 0;
}

}  // namespace kapitsa::text
