// Parser (see parser.h). Recursive descent over the token vector; each parse_* mirrors the
// method of the same name in jinja2/parser.py so precedence and quirks match.
#include "text/jinja/parser.h"

#include "text/jinja/error.h"

#include <unordered_set>

namespace kapitsa::text::jinja {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::Eof) error_here("unexpected tag");
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.error_here("template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Text: return "template data";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::Name: return "'" + t.value + "'";
      case Tok::String: return "string";
      case Tok::Int: case Tok::Float: return "number";
      case Tok::Op: return "'" + t.value + "'";
      case Tok::Eof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void error_here(const std::string& message) const {
    throw TemplateError(message, cur().line, cur().col);
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    error_here("unexpected " + describe(cur()) + (expected.empty() ? "" : ", expected " + expected));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) unexpected("end of statement block");
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) unexpected("a name");
    std::string n = cur().value;
    next();
    return n;
  }

  // Sets e's subtree height from its children; long operator or attribute chains are iterative in
  // the parser but recursive at evaluation, so their height is bounded too.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    for (const ExprPtr* c : {&e->a, &e->b, &e->c, &e->d})
      if (*c) d = std::max(d, (*c)->depth);
    for (const auto& item : e->items) d = std::max(d, item->depth);
    for (const auto& kw : e->kwargs) d = std::max(d, kw.second->depth);
    e->depth = d + 1;
    if (e->depth > 2 * kMaxNesting) throw TemplateError("expression nests too deeply", e->line, e->col);
    return e;
  }

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ----

  // Parses until `{% <one of stop> ...`; leaves the position on that tag's name.
  Body parse_body(std::initializer_list<const char*> stop) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (stop.size() == 0) return body;
        std::string names;
        for (const char* s : stop) names += (names.empty() ? "'" : " or '") + std::string(s) + "'";
        error_here("unexpected end of template, expected " + names);
      }
      if (t.type == Tok::Text) {
        auto s = stmt(StmtKind::Text, t);
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        auto s = stmt(StmtKind::Output, t);
        next();
        s->expr = parse_tuple(true, false);
        if (cur().type != Tok::VarEnd) unexpected("end of print statement");
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.type == Tok::Name)
          for (const char* s : stop)
            if (name.value == s) {
              next();
              return body;
            }
        next();
        body.push_back(parse_statement());
      } else {
        unexpected("");
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != Tok::Name) unexpected("a statement name");
    std::string kw = t.value;
    next();
    if (kw == "if") return parse_if(t);
    if (kw == "for") return parse_for(t);
    if (kw == "set") return parse_set(t);
    if (kw == "macro") return parse_macro(t);
    if (kw == "call") return parse_call_block(t);
    if (kw == "filter") return parse_filter_block(t);
    if (kw == "with") return parse_with(t);
    if (kw == "generation") {
      auto s = stmt(StmtKind::Generation, t);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      end_tag();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) throw TemplateError("'" + kw + "' outside of a loop", t.line, t.col);
      auto s = stmt(kw == "break" ? StmtKind::Break : StmtKind::Continue, t);
      expect_block_end();
      return s;
    }
    throw TemplateError("unknown or unsupported tag '" + kw + "'", t.line, t.col);
  }

  void end_tag() {  // after the end keyword
    next();
    expect_block_end();
  }

  StmtPtr parse_if(const Token& at) {
    auto s = stmt(StmtKind::If, at);
    while (true) {
      s->conds.push_back(parse_tuple(true, false));
      expect_block_end();
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      std::string which = cur().value;
      next();
      if (which == "elif") continue;
      if (which == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        next();
      }
      expect_block_end();
      return s;
    }
  }

  Target parse_target(bool allow_attr) {
    Target target;
    bool parens = skip_op("(");
    std::string first = expect_name();
    if (!parens && allow_attr && skip_op(".")) {
      target.name = first;
      target.attr = expect_name();
      return target;
    }
    if (is_op(",")) {
      target.names.push_back(first);
      while (skip_op(",")) {
        if (cur().type != Tok::Name) break;
        target.names.push_back(expect_name());
      }
    } else {
      target.name = first;
    }
    if (parens) expect_op(")");
    return target;
  }

  StmtPtr parse_for(const Token& at) {
    auto s = stmt(StmtKind::For, at);
    s->target = parse_target(false);
    if (!skip_name("in")) unexpected("'in'");
    s->expr = parse_tuple(false, false, "recursive");
    if (skip_name("if")) s->filter = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (cur().value == "else") {
      next();
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    end_tag();
    return s;
  }

  StmtPtr parse_set(const Token& at) {
    auto s = stmt(StmtKind::Set, at);
    s->target = parse_target(true);
    if (skip_op("=")) {
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    s->kind = StmtKind::SetBlock;
    if (!s->target.attr.empty() || !s->target.names.empty()) error_here("block set needs a plain name");
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    end_tag();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      for (const auto& other : s.params)
        if (other.name == p.name) error_here("duplicate argument '" + p.name + "' in macro definition");
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!s.params.empty() && s.params.back().default_value)
        error_here("non-default argument follows default argument");
      s.params.push_back(std::move(p));
    }
    next();
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = stmt(StmtKind::Macro, at);
    s->text = expect_name();
    parse_params(*s);
    expect_block_end();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    names_.emplace_back();
    s->body = parse_body({"endmacro"});
    s->uses_varargs = names_.back().count("varargs") > 0;
    s->uses_kwargs = names_.back().count("kwargs") > 0;
    s->uses_caller = names_.back().count("caller") > 0;
    names_.pop_back();
    loop_depth_ = saved_loops;
    end_tag();
    return s;
  }

  StmtPtr parse_call_block(const Token& at) {
    auto s = stmt(StmtKind::CallBlock, at);
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) throw TemplateError("expected a call after 'call'", at.line, at.col);
    expect_block_end();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    names_.emplace_back();
    s->body = parse_body({"endcall"});
    names_.pop_back();
    loop_depth_ = saved_loops;
    end_tag();
    return s;
  }

  StmtPtr parse_filter_block(const Token& at) {
    auto s = stmt(StmtKind::FilterBlock, at);
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    end_tag();
    return s;
  }

  StmtPtr parse_with(const Token& at) {
    auto s = stmt(StmtKind::With, at);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->assignments.emplace_back(name, parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    end_tag();
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(const char* extra) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.value == ")") return true;
    return extra && t.type == Tok::Name && t.value == extra;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, const char* extra_end = nullptr) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) unexpected("an expression");
    }
    auto e = node(ExprKind::Tuple, at);
    e->items = std::move(items);
    return seal(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token& at = cur();
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto e = node(ExprKind::Cond, at);
      e->b = parse_or();
      if (skip_name("else")) e->c = parse_condexpr();
      e->a = std::move(expr);
      expr = seal(std::move(e));
    }
    return expr;
  }

  ExprPtr binary(const char* op, ExprPtr left, ExprPtr right, const Token& at) {
    auto e = node(ExprKind::Binary, at);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    const Token& at = cur();
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary("or", std::move(left), parse_and(), at);
    return left;
  }

  ExprPtr parse_and() {
    const Token& at = cur();
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary("and", std::move(left), parse_not(), at);
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = node(ExprKind::Unary, cur());
      next();
      e->name = "not";
      e->a = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::Compare, at);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    const Token& at = cur();
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const char* op = is_op("+") ? "+" : "-";
      next();
      left = binary(op, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary("~", std::move(left), parse_math2(), at);
    return left;
  }

  ExprPtr parse_math2() {
    const Token& at = cur();
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().value;
      next();
      auto e = binary("", std::move(left), parse_pow(), at);
      e->name = op;
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const Token& at = cur();
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary("**", std::move(left), parse_unary(true), at);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(ExprKind::Unary, cur());
      e->name = cur().value;
      next();
      e->a = parse_unary(false);
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Tok::Name: {
        auto e = node(ExprKind::Literal, t);
        if (t.value == "true" || t.value == "True") e->value = Value(true);
        else if (t.value == "false" || t.value == "False") e->value = Value(false);
        else if (t.value == "none" || t.value == "None") e->value = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = t.value;
          if (!names_.empty()) names_.back().insert(t.value);
        }
        next();
        return e;
      }
      case Tok::String: {
        auto e = node(ExprKind::Literal, t);
        std::string s;
        while (cur().type == Tok::String) {  // adjacent literals concatenate
          s += cur().value;
          next();
        }
        e->value = Value(std::move(s));
        return e;
      }
      case Tok::Int: {
        auto e = node(ExprKind::Literal, t);
        e->value = Value(t.int_value);
        next();
        return e;
      }
      case Tok::Float: {
        auto e = node(ExprKind::Literal, t);
        e->value = Value(t.float_value);
        next();
        return e;
      }
      case Tok::Op:
        if (t.value == "(") {
          next();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          auto e = node(ExprKind::List, t);
          next();
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          next();
          return seal(std::move(e));
        }
        if (t.value == "{") {
          auto e = node(ExprKind::Dict, t);
          next();
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          next();
          return seal(std::move(e));
        }
        break;
      default:
        break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = cur();
        next();
        if (cur().type == Tok::Name) {
          auto g = node(ExprKind::Getattr, at);
          g->name = cur().value;
          g->a = std::move(e);
          e = seal(std::move(g));
          next();
        } else if (cur().type == Tok::Int) {
          auto g = node(ExprKind::Getitem, at);
          g->a = std::move(e);
          g->b = node(ExprKind::Literal, cur());
          g->b->value = Value(cur().int_value);
          e = seal(std::move(g));
          next();
        } else {
          unexpected("an attribute name");
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    const Token& at = cur();
    next();
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      if (is_op("]")) break;
      args.push_back(parse_subscribed());
    }
    next();
    if (args.empty()) throw TemplateError("expected a subscript", at.line, at.col);
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      // a[1:2, 3]: Python builds a tuple of slice objects, which no sequence in a template accepts.
      for (const ExprPtr& arg : args)
        if (arg->kind == ExprKind::Slice) throw TemplateError("a slice can not be part of a tuple subscript", at.line, at.col);
      index = node(ExprKind::Tuple, at);
      index->items = std::move(args);
    }
    if (index->kind == ExprKind::Slice && !index->a) {  // slice syntax, not an expression that slices
      index->a = std::move(target);
      return seal(std::move(index));
    }
    auto g = node(ExprKind::Getitem, at);
    g->a = std::move(target);
    g->b = seal(std::move(index));
    return seal(std::move(g));
  }

  // One subscript element: an expression or a slice (a Slice node with b/c/d = start/stop/step).
  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto s = node(ExprKind::Slice, at);
    s->b = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->c = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) s->d = parse_expression(true);
    }
    return seal(std::move(s));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) error_here("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error_here("positional argument after keyword argument");
        e.items.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, cur());
    e->a = std::move(callee);
    parse_call_args(*e);
    return seal(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().type == Tok::Name) {
      next();
      name += "." + cur().value;
      next();
    }
    return name;
  }

  // `| f(args) | g ...` applied to `input` (null for filter blocks and block sets).
  ExprPtr parse_filter_chain(ExprPtr input, bool leading_pipe = true) {
    bool first = true;
    while (true) {
      if (leading_pipe || !first) {
        if (!skip_op("|")) break;
      }
      first = false;
      auto f = node(ExprKind::Filter, cur());
      f->name = parse_dotted_name();
      if (is_op("(")) parse_call_args(*f);
      f->a = std::move(input);
      input = seal(std::move(f));
    }
    return input;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr subject) {
    auto t = node(ExprKind::Test, cur());
    next();
    if (skip_name("not")) t->negated = true;
    t->name = parse_dotted_name();
    if (is_op("(")) {
      parse_call_args(*t);
    } else {
      const Token& c = cur();
      bool arg_start = c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
                       c.type == Tok::Float || (c.type == Tok::Op && (c.value == "[" || c.value == "{"));
      if (c.type == Tok::Name && (c.value == "else" || c.value == "or" || c.value == "and" || c.value == "if"))
        arg_start = false;
      if (arg_start) {
        if (c.type == Tok::Name && c.value == "is") error_here("you cannot chain multiple tests with is");
        t->items.push_back(parse_postfix(parse_primary()));
      }
    }
    t->a = std::move(subject);
    return seal(std::move(t));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::unordered_set<std::string>> names_;  // names read inside the macro being parsed
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace kapitsa::text::jinja
