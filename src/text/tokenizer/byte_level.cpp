// ByteLevel mapping tables, built once.
#include "text/tokenizer/byte_level.h"

#include <cstdint>

namespace kapitsa::text {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x200> from_char{};  // code point → byte, −1 when unmapped (all mapped ones < 0x200)
  Tables() {
    from_char.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : char32_t(0x100 + n++);
      from_char[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

std::string bytes_to_mapped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(tables().to_char[b], out);
  return out;
}

void mapped_to_bytes(std::string_view token, std::string& out) {
  const Tables& t = tables();
  const size_t start = out.size();
  // Mapped characters are all below U+0200, i.e. 1 or 2 UTF-8 bytes.
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      c = 0x200;  // anything longer is outside the map
    }
    if (c >= 0x200 || t.from_char[c] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out += static_cast<char>(t.from_char[c]);
  }
}

}  // namespace kapitsa::text
