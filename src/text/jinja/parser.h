// Parser: tokens → AST, following jinja2/parser.py's grammar and operator precedence
// (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < postfix/filters/tests).
// Not supported (a parse error, by design: no I/O in the sandbox): extends, include, import, block.
// Nesting is bounded so a hostile template cannot exhaust the stack.
#pragma once

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace kapitsa::text::jinja {

// Throws TemplateError (with the offending token's line and column).
Body parse(std::vector<Token> tokens);

}  // namespace kapitsa::text::jinja
