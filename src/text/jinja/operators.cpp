// Binary operators and comparisons with Python's semantics and error messages: int/float
// promotion, floor division and modulo with the sign of the divisor, str/list concatenation and
// repetition, `%` string formatting, `in`, and ordering of numbers, strings and lists.
// Integer overflow is an error (Python has big ints; templates never need them).
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

#include <cmath>
#include <cstring>

namespace kapitsa::text::jinja {

void fail_undefined(const Value& v) {
  std::string hint = v.undefined_hint();
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value(std::string(), seq.is_markup()) : Value(List{});
  if (seq.is_string()) {
    size_t total = seq.str().size() * static_cast<size_t>(std::min<int64_t>(times, INT32_MAX));
    if (times > in.limits().max_range && !seq.str().empty()) fail("repetition count {} is too large", times);
    in.check_string_size(total);
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out), seq.is_markup());
  }
  const List& l = seq.list();
  if (times > in.limits().max_range || l.size() * static_cast<size_t>(times) > static_cast<size_t>(in.limits().max_range))
    fail("repetition count {} is too large", times);
  in.charge(static_cast<int64_t>(l.size()) * times);
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value(std::move(out));
}

// printf-style `str % args`: %s %r %d %i %f %x %% with optional width/precision flags.
Value percent_format(Interpreter& in, const Value& fmt_value, const Value& arg) {
  std::vector<Value> args = arg.is_list() ? arg.list() : std::vector<Value>{arg};
  const std::string& f = fmt_value.str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    size_t j = i + 1;
    std::string spec;
    while (j < f.size() && std::strchr("-+ #0123456789.", f[j])) spec.push_back(f[j++]);
    if (j >= f.size()) fail("incomplete format");
    char conv = f[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) fail("not enough arguments for format string");
    const Value& v = args[next++];
    std::string body;
    switch (conv) {
      case 's': body = py_str(v); break;
      case 'r': body = py_repr_value(v); break;
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!v.is_number()) fail("%{} format: a real number is required, not {}", conv, v.type_name());
        int64_t n = v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int();
        body = conv == 'x' ? fmt::format("{:x}", n) : conv == 'X' ? fmt::format("{:X}", n)
               : conv == 'o' ? fmt::format("{:o}", n) : std::to_string(n);
        break;
      }
      case 'f': case 'F': case 'e': case 'g': {
        if (!v.is_number()) fail("must be real number, not {}", v.type_name());
        std::string pf = "%" + spec + conv;
        char buf[512];
        std::snprintf(buf, sizeof buf, pf.c_str(), v.as_float());
        out += buf;
        continue;
      }
      default: fail("unsupported format character '{}'", conv);
    }
    // width for %s / %d: right-aligned unless '-'
    size_t width = 0;
    bool left = spec.find('-') != std::string::npos;
    for (char c : spec)
      if (c >= '0' && c <= '9' && width < 10000) width = width * 10 + static_cast<size_t>(c - '0');
    size_t len = utf8_length(body);
    if (len < width) body = left ? body + std::string(width - len, ' ') : std::string(width - len, ' ') + body;
    out += body;
  }
  if (next < args.size() && !arg.is_dict()) fail("not all arguments converted during string formatting");
  in.check_string_size(out.size());
  return Value(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = py_str(a);
    s += py_str(b);
    in.check_string_size(s.size());
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool ints = is_intlike(a) && is_intlike(b);
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      in.check_string_size(a.str().size() + b.str().size());
      // markupsafe: adding to a Markup string escapes the plain operand.
      if (a.is_markup() != b.is_markup())
        return Value(a.is_markup() ? a.str() + html_escape(b.str()) : html_escape(a.str()) + b.str(), true);
      return Value(a.str() + b.str(), a.is_markup());
    }
    if (a.is_list() && b.is_list()) {
      in.charge(static_cast<int64_t>(a.list().size() + b.list().size()));
      if (a.is_tuple() != b.is_tuple())
        fail("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name());
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value(std::move(out), a.is_tuple());
    }
    if (a.is_string()) fail("can only concatenate str (not \"{}\") to str", b.type_name());
    if (a.is_list()) fail("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name());
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() - b.as_float());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(in, b, a.as_int());
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_float() == 0) fail("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) unsupported("//", a, b);
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      if (a.as_int() == INT64_MIN && b.as_int() == -1) fail("integer overflow");
      return Value(floor_div(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0) fail("float floor division by zero");
    return Value(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (a.is_string()) return percent_format(in, a, b);
    if (!nums) unsupported("%", a, b);
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      if (b.as_int() == -1) return Value(int64_t{0});
      return Value(a.as_int() - floor_div(a.as_int(), b.as_int()) * b.as_int());
    }
    if (b.as_float() == 0) fail("float modulo");
    double r = std::fmod(a.as_float(), b.as_float());
    if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
    return Value(r);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), exp = b.as_int(), r = 1;
      while (exp > 0) {
        if (exp & 1) {
          if (__builtin_mul_overflow(r, base, &r)) fail("integer overflow");
        }
        exp >>= 1;
        if (exp > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
      }
      return Value(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0) fail("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  fail("unknown operator '{}'", op);
}

namespace {

// <0, 0, >0 like Python's ordering; fails for types Python cannot order.
int order(const Value& a, const Value& b, const std::string& op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as equal-ish; callers only use < and >
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return order(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name());
}

}  // namespace

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    switch (b.kind()) {
      case Kind::Undefined: found = false; break;
      case Kind::String:
        if (!a.is_string()) fail("'in <string>' requires string as left operand, not {}", a.type_name());
        found = b.str().find(a.str()) != std::string::npos;
        break;
      case Kind::List:
        for (const Value& item : b.list())
          if (py_equal(item, a)) { found = true; break; }
        break;
      case Kind::Dict: case Kind::Namespace:
        if (b.is_namespace()) fail("argument of type 'Namespace' is not iterable");
        found = b.dict().find(a) != nullptr;
        break;
      default: fail("argument of type '{}' is not iterable", b.type_name());
    }
    return op == "in" ? found : !found;
  }
  if (a.is_float() && std::isnan(a.as_float())) return false;
  if (b.is_float() && std::isnan(b.as_float())) return false;
  int c = order(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  fail("unknown comparison '{}'", op);
}

}  // namespace kapitsa::text::jinja
