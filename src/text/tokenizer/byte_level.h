// The GPT-2 ByteLevel byte↔character mapping used by byte-level BPE vocabularies: each byte is shown
// as one printable code point (printable Latin-1 maps to itself, the other 68 bytes to U+0100+n).
// Encoding maps UTF-8 bytes to those characters; decoding a token maps them back, and — as Hugging
// Face's ByteLevel decoder does — a token holding any character outside the map is passed through raw.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace kapitsa::text {

// Code point that stands for byte b.
char32_t byte_to_char(unsigned char b);

// UTF-8 of the mapped characters of `bytes` (what the vocabulary stores).
std::string bytes_to_mapped(std::string_view bytes);

// Inverse for one token string: appends its bytes to `out`. A token with a character outside the map
// is appended unchanged (HF behaviour, matters for added tokens such as ones containing a space).
void mapped_to_bytes(std::string_view token, std::string& out);

// Appends the UTF-8 encoding of code point c.
void append_utf8(char32_t c, std::string& out);

}  // namespace kapitsa::text
