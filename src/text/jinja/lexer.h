// Lexer: template source → tokens, with Hugging Face's environment settings baked in
// (trim_blocks, lstrip_blocks, keep_trailing_newline=False, newlines normalised to "\n" the way
// Jinja's splitlines() does). Whitespace control (`{%-`, `-%}`, `{%+`, `+%}`) is applied here, so
// the parser sees text tokens that are already trimmed. Errors are TemplateErrors with a position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kapitsa::text::jinja {

enum class Tok : uint8_t {
  Text,        // literal template data
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value holds the unescaped text
  Int,
  Float,
  Op,          // value holds the operator: + - * / // % ** ~ ( ) [ ] { } == != < <= > >= = . : | , ;
  Eof,
};

struct Token {
  Tok type;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
  int col = 0;
};

// Jinja's source normalisation: every line break splitlines() knows becomes "\n" and one trailing
// line break is dropped.
std::string normalize_newlines(std::string_view source);

// Tokenises normalised source. Throws TemplateError (with line and column) on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace kapitsa::text::jinja
