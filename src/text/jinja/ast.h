// AST for the Jinja subset: expression and statement nodes, each with the line and column of the
// token that starts it (runtime errors point there). One tagged struct per family keeps the tree
// walk in interpreter.cpp / eval.cpp a single switch. Nodes are immutable after parsing.
#pragma once

#include "text/jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kapitsa::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  Literal,   // value
  Name,      // name
  List,      // items
  Tuple,     // items (a tuple behaves as a list at runtime)
  Dict,      // items = key0, value0, key1, value1, ...
  Getattr,   // a.name
  Getitem,   // a[b]
  Slice,     // a[b:c:d]  (missing parts are null)
  Call,      // a(args..., kwargs...)
  Filter,    // a | name(args...)   (a is null inside `{% filter %}` blocks)
  Test,      // a is [not] name(args...)   (negated)
  Unary,     // op a: "not", "-", "+"
  Binary,    // a op b: + - * / // % ** ~ and or
  Compare,   // a op0 items[0] op1 items[1] ... (ops in `ops`), chained like Python
  Cond,      // a if b else c   (c may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int col = 0;
  int depth = 1;               // height of this subtree (bounded by the parser)
  Value value;                 // Literal
  std::string name;            // Name, Getattr, Filter, Test; Unary/Binary operator
  bool negated = false;        // Test: `is not`
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;  // List/Tuple/Dict items, Call/Filter/Test positional args, Compare operands
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
};

// Assignment target: a name, a namespace attribute (`ns.x`) or a tuple of names.
struct Target {
  std::string name;                // Name target, or the namespace variable for attribute targets
  std::string attr;                // non-empty: `name.attr`
  std::vector<std::string> names;  // non-empty: tuple unpacking
};

enum class StmtKind : uint8_t {
  Text,      // text
  Output,    // {{ expr }}
  If,        // conds[i] → bodies[i]; else_body
  For,       // for target in expr [if filter] [recursive]: body, else_body
  Set,       // set target = expr
  SetBlock,  // set target [| filter] %} body {% endset
  Macro,     // macro name(params=defaults): body
  CallBlock, // call(params) expr: body (body is the `caller`)
  FilterBlock,  // filter f: body   (expr is the filter chain applied to a null input)
  With,      // with a = x, b = y: body
  Break,
  Continue,
  Generation,  // {% generation %}: body (Hugging Face's AssistantTracker; renders its body)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int col = 0;
  std::string text;             // Text; Macro name
  ExprPtr expr;                 // Output, For iterable, Set value, CallBlock call, FilterBlock filter
  ExprPtr filter;               // For `if` filter; SetBlock filter
  Target target;                // For, Set, SetBlock
  std::vector<ExprPtr> conds;   // If conditions
  std::vector<Body> bodies;     // If bodies
  Body body;
  Body else_body;
  bool recursive = false;       // For
  std::vector<MacroParam> params;  // Macro, CallBlock
  bool uses_varargs = false;    // Macro body mentions `varargs` / `kwargs` / `caller`
  bool uses_kwargs = false;
  bool uses_caller = false;
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // With
};

}  // namespace kapitsa::text::jinja
