// UTF-8 validation with the "substitution of maximal subparts" rule (what Rust's from_utf8_lossy and
// Hugging Face tokenizers use): every invalid byte run becomes one U+FFFD. Works incrementally: a
// valid-so-far sequence cut by the end of the input is held back unless `final` is set, so a stream
// decoded piecewise gives exactly the bytes of decoding it whole, and never half a character.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kapitsa::text {

// Appends the lossy-valid form of `in` to `out`; returns how many bytes of `in` were consumed. When
// `final` is false an incomplete trailing sequence (at most 3 bytes) is left unconsumed.
size_t utf8_append_lossy(std::string_view in, std::string& out, bool final);

// The whole of `in` made valid (invalid runs → U+FFFD).
std::string utf8_lossy(std::string_view in);

bool utf8_is_valid(std::string_view in);

// Length of the trailing bytes of `in` that form a valid-so-far but incomplete sequence (0..3).
size_t utf8_incomplete_tail(std::string_view in);

}  // namespace kapitsa::text
