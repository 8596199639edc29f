// Python str semantics over UTF-8 std::string: what Jinja templates observe through Python's str
// (code-point length and slicing, str.isspace, strip/split, case mapping, repr quoting, float repr).
// Not a general Unicode library: case mapping is per code point (utf8proc), no special casing.
// Invalid UTF-8 bytes decode to U+FFFD so a malformed template can never read out of bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text::jinja {

std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);  // number of code points

bool py_isspace(char32_t cp);  // Python str.isspace for one code point
bool py_isalnum(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isprintable(char32_t cp);
char32_t py_upper(char32_t cp);
char32_t py_lower(char32_t cp);
bool py_is_cased_upper(char32_t cp);
bool py_is_cased_lower(char32_t cp);

// str.strip / lstrip / rstrip; chars = nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) (sep = nullopt: runs of whitespace) and str.rsplit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines() (no keepends): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029.
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title
std::string py_capitalize(std::string_view s);  // str.capitalize
std::string py_swapcase(std::string_view s);

// repr(str): quotes and escapes exactly like CPython.
std::string py_repr(std::string_view s);
// repr(float) / str(float): shortest round-trip digits, CPython's switch to exponent form.
std::string py_float_repr(double v);
// Replaces & < > " ' by HTML entities (markupsafe.escape).
std::string html_escape(std::string_view s);

}  // namespace kapitsa::text::jinja
