// Template (see template.h): lexing, parsing and a check that every filter and test named exists
// (Jinja rejects unknown ones when compiling), then rendering with all internal errors caught.
#include "text/jinja/template.h"

#include "text/jinja/ast.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/json_value.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace kapitsa::text::jinja {
namespace {

// Jinja rejects unknown filters and tests when compiling, except inside `if` statements and
// inline if-expressions, where it defers the error to the moment they run (so do we).
void check_expr(const Expr* e, bool soft);

void check_body(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    bool inner = soft || s->kind == StmtKind::If;
    check_expr(s->expr.get(), inner);
    check_expr(s->filter.get(), inner);
    for (const auto& c : s->conds) check_expr(c.get(), inner);
    for (const auto& b : s->bodies) check_body(b, inner);
    check_body(s->body, inner);
    check_body(s->else_body, inner);
    for (const auto& p : s->params) check_expr(p.default_value.get(), inner);
    for (const auto& a : s->assignments) check_expr(a.second.get(), inner);
  }
}

void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  soft = soft || e->kind == ExprKind::Cond;
  if (!soft && e->kind == ExprKind::Filter && !has_filter(e->name))
    throw TemplateError("no filter named '" + e->name + "'", e->line, e->col);
  if (!soft && e->kind == ExprKind::Test && !has_test(e->name))
    throw TemplateError("no test named '" + e->name + "'", e->line, e->col);
  for (const ExprPtr* c : {&e->a, &e->b, &e->c, &e->d}) check_expr(c->get(), soft);
  for (const auto& item : e->items) check_expr(item.get(), soft);
  for (const auto& kw : e->kwargs) check_expr(kw.second.get(), soft);
}

Error to_error(const std::string& name, const TemplateError& e) {
  if (e.line > 0) return error("{}:{}:{}: {}", name, e.line, e.col, e.what());
  return error("{}: {}", name, e.what());
}

}  // namespace

Expected<Template> Template::parse(std::string_view source, std::string name) {
  try {
    std::string normalized = normalize_newlines(source);
    auto body = std::make_shared<Body>(jinja::parse(tokenize(normalized)));
    check_body(*body, false);
    Template t;
    t.body_ = std::move(body);
    t.name_ = std::move(name);
    return t;
  } catch (const TemplateError& e) {
    return to_error(name, e);
  } catch (const std::exception& e) {
    return error("{}: {}", name, e.what());
  }
}

Expected<std::string> Template::render(const Dict& context, const Limits& limits) const {
  try {
    Interpreter interpreter(limits, name_);
    return interpreter.render(*body_, context);
  } catch (const TemplateError& e) {
    return to_error(name_, e);
  } catch (const std::exception& e) {
    return error("{}: {}", name_, e.what());
  }
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  if (!context.is_object()) return error("{}: the render context must be a JSON object", name_);
  try {
    Value v = from_json(context);
    return render(v.dict(), limits);
  } catch (const TemplateError& e) {
    return to_error(name_, e);
  }
}

}  // namespace kapitsa::text::jinja
