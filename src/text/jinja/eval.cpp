// Interpreter, expression side: names, literals, attribute and item access, slicing, calls,
// filters, tests, boolean logic and chained comparisons (see interpreter.h). Arithmetic and
// comparison of values are in operators.cpp.
#include "text/jinja/interpreter.h"

#include "text/jinja/pystr.h"

namespace kapitsa::text::jinja {

Value Interpreter::eval(const Expr& e) {
  charge(1);
  try {
    switch (e.kind) {
      case ExprKind::Literal: return e.value;
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List: case ExprKind::Tuple: {
        List items;
        items.reserve(e.items.size());
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        auto d = make_dict();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value key = eval(*e.items[i]);
          if (key.is_list() || key.is_dict() || key.is_undefined())
            fail("unhashable type: '{}'", key.type_name());
          d->set(std::move(key), eval(*e.items[i + 1]));
        }
        return Value(d);
      }
      case ExprKind::Getattr: return getattr(eval(*e.a), e.name);
      case ExprKind::Getitem: return getitem(eval(*e.a), eval(*e.b));
      case ExprKind::Slice: return eval_slice(e);
      case ExprKind::Call: return eval_call(e);
      case ExprKind::Filter: {
        Value input = eval(*e.a);
        CallArgs args;
        eval_args(e, args);
        return apply_filter(e.name, input, args);
      }
      case ExprKind::Test: {
        Value input = eval(*e.a);
        CallArgs args;
        eval_args(e, args);
        return Value(apply_test(e.name, input, args) != e.negated);
      }
      case ExprKind::Unary: {
        Value v = eval(*e.a);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) fail_undefined(v);
        if (v.is_bool() || v.is_int()) {
          if (e.name == "+") return Value(v.as_int());
          if (v.as_int() == INT64_MIN) fail("integer overflow");
          return Value(-v.as_int());
        }
        if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
        fail("bad operand type for unary {}: '{}'", e.name, v.type_name());
      }
      case ExprKind::Binary: return eval_binary(e);
      case ExprKind::Compare: return eval_compare(e);
      case ExprKind::Cond:
        if (eval(*e.b).truthy()) return eval(*e.a);
        return e.c ? eval(*e.c) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  } catch (const TemplateError& err) {
    rethrow_at(err, e.line, e.col);
  }
  return Value();
}

void Interpreter::eval_args(const Expr& e, CallArgs& args) {
  args.args.reserve(e.items.size());
  for (const auto& a : e.items) args.args.push_back(eval(*a));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v));
}

Value Interpreter::eval_binary(const Expr& e) {
  if (e.name == "and") {
    Value a = eval(*e.a);
    return a.truthy() ? eval(*e.b) : a;
  }
  if (e.name == "or") {
    Value a = eval(*e.a);
    return a.truthy() ? a : eval(*e.b);
  }
  Value a = eval(*e.a);
  Value b = eval(*e.b);
  return binary_op(*this, e.name, a, b);
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.a);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i]);
    if (!compare_op(e.ops[i], left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_call(const Expr& e) {
  Value callee = eval(*e.a);
  CallArgs args;
  eval_args(e, args);
  return call(callee, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.kind() == Kind::Callable) return callee.callable()->fn(*this, args);
  if (callee.has_call()) return callee.dict().call->fn(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  fail("'{}' object is not callable", callee.type_name());
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  return run_filter(*this, name, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  return run_test(*this, name, input, args);
}

static std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  return "'" + v.type_name() + " object'";
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Namespace: case Kind::Dict: {
      if (obj.is_dict() && !obj.has_call()) {
        Value method = find_method(obj, name);
        if (!method.is_undefined()) return method;
      }
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      break;
    }
    case Kind::String: case Kind::List: {
      Value method = find_method(obj, name);
      if (!method.is_undefined()) return method;
      break;
    }
    default: break;
  }
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: fail_undefined(obj);  // Jinja's Undefined fails on any subscript
    case Kind::Dict: case Kind::Namespace:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Kind::List:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        int64_t n = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
        return Value::undefined("list index out of range");
      }
      break;
    case Kind::String:
      if (key.is_int() || key.is_bool()) {
        std::u32string u = utf8_decode(obj.str());
        int64_t i = key.as_int();
        int64_t n = static_cast<int64_t>(u.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string s;
          utf8_append(s, u[static_cast<size_t>(i)]);
          return Value(std::move(s));
        }
        return Value::undefined("string index out of range");
      }
      break;
    default: break;
  }
  if (key.is_string()) return getattr(obj, key.str());
  return Value::undefined(object_name(obj) + " has no element " + py_repr_value(key));
}

// Python slice semantics (negative indices, clamping, any non-zero step) on lists and strings.
Value Interpreter::eval_slice(const Expr& e) {
  if (!e.a) fail("a slice can only appear directly inside []");  // the parser never builds one; stay safe
  Value obj = eval(*e.a);
  auto bound = [&](const ExprPtr& x) -> std::optional<int64_t> {
    if (!x) return std::nullopt;
    Value v = eval(*x);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    return v.as_int();
  };
  std::optional<int64_t> start = bound(e.b), stop = bound(e.c), step_opt = bound(e.d);
  int64_t step = step_opt.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  if (step == INT64_MIN) step = INT64_MIN + 1;

  auto pick = [&](int64_t n, auto&& take) {
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) {
        x = x < -n ? (step < 0 ? -1 : 0) : x + n;
      } else if (x >= n) {
        x = step < 0 ? n - 1 : n;
      }
      return x;
    };
    int64_t lo = clamp(start, step < 0 ? n - 1 : 0);
    int64_t hi = clamp(stop, step < 0 ? -1 : n);
    if (step > 0) {
      for (int64_t i = lo; i < hi;) {
        take(static_cast<size_t>(i));
        if (hi - i <= step) break;  // no overflow for huge steps
        i += step;
      }
    } else {
      for (int64_t i = lo; i > hi;) {
        take(static_cast<size_t>(i));
        if (i - hi <= -step) break;
        i += step;
      }
    }
  };

  if (obj.is_list()) {
    const List& l = obj.list();
    List out;
    pick(static_cast<int64_t>(l.size()), [&](size_t i) { out.push_back(l[i]); });
    charge(static_cast<int64_t>(out.size()));
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.str());
    std::u32string out;
    pick(static_cast<int64_t>(u.size()), [&](size_t i) { out.push_back(u[i]); });
    charge(static_cast<int64_t>(out.size() / 64));
    return Value(utf8_encode(out), obj.is_markup());
  }
  if (obj.is_undefined()) fail_undefined(obj);
  // Jinja subscripts slices directly in Python (no getitem fallback), so anything else fails.
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  fail("'{}' object is not subscriptable", obj.type_name());
}

}  // namespace kapitsa::text::jinja
