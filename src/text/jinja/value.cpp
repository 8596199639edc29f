// Value: construction, truthiness, Python equality, str() and repr() (see value.h).
#include "text/jinja/value.h"

#include "text/jinja/error.h"
#include "text/jinja/pystr.h"

#include <cmath>

namespace kapitsa::text::jinja {

Value::Value(std::string s, bool markup)
    : kind_(Kind::String), markup_(markup), s_(std::make_shared<const std::string>(std::move(s))) {}

Value::Value(List items, bool is_tuple) : kind_(Kind::List), markup_(is_tuple) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  if (d + 1 > kMaxValueDepth) fail("values nest deeper than {} levels", kMaxValueDepth);
  depth_ = static_cast<uint16_t>(d + 1);
  l_ = std::make_shared<const List>(std::move(items));
}

Value::Value(std::shared_ptr<Dict> dict, bool is_namespace)
    : kind_(is_namespace ? Kind::Namespace : Kind::Dict), d_(std::move(dict)) {
  if (is_namespace) return;  // namespaces are never recursed into (they may contain themselves)
  int d = 0;
  for (const auto& [k, v] : d_->items) d = std::max(d, v.depth());
  if (d + 1 > kMaxValueDepth) fail("values nest deeper than {} levels", kMaxValueDepth);
  depth_ = static_cast<uint16_t>(d + 1);
}

Value::Value(std::shared_ptr<const Callable> callable) : kind_(Kind::Callable), c_(std::move(callable)) {}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)}));
}

double Value::as_float() const {
  switch (kind_) {
    case Kind::Float: return f_;
    case Kind::Int: return static_cast<double>(i_);
    case Kind::Bool: return b_ ? 1.0 : 0.0;
    default: return 0.0;
  }
}

bool Value::has_call() const { return (kind_ == Kind::Dict || kind_ == Kind::Namespace) && d_ && d_->call; }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !s_->empty();
    case Kind::List: return !l_->empty();
    case Kind::Dict: return !d_->items.empty();
    case Kind::Namespace: case Kind::Callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return markup_ ? "Markup" : "str";
    case Kind::List: return markup_ ? "tuple" : "list";
    case Kind::Dict: return has_call() ? "LoopContext" : "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

std::shared_ptr<Dict> make_dict() { return std::make_shared<Dict>(); }

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::String: return a.str() == b.str();
    case Kind::List: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const List& x = a.list();
      const List& y = b.list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size() || x.call || y.call) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::Namespace: return &a.dict() == &b.dict();
    case Kind::Callable: return a.callable() == b.callable();
    default: return false;
  }
}

static void append_repr(const Value& v, std::string& out);

static void append_str(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::Undefined: return;
    case Kind::String: out += v.str(); return;
    default: append_repr(v, out);
  }
}

static void append_repr(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::Undefined: out += "Undefined"; return;  // repr(); str() of Undefined is ""
    case Kind::None: out += "None"; return;
    case Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::Int: out += std::to_string(v.as_int()); return;
    case Kind::Float: out += py_float_repr(v.as_float()); return;
    case Kind::String:
      if (v.is_markup()) out += "Markup(";
      out += py_repr(v.str());
      if (v.is_markup()) out += ")";
      return;
    case Kind::List: {
      out += v.is_tuple() ? '(' : '[';
      bool first = true;
      for (const Value& item : v.list()) {
        if (!first) out += ", ";
        first = false;
        append_repr(item, out);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      return;
    }
    case Kind::Dict: {
      if (v.has_call()) {
        out += "<LoopContext>";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        append_repr(k, out);
        out += ": ";
        append_repr(item, out);
      }
      out += '}';
      return;
    }
    case Kind::Namespace: out += "<Namespace>"; return;
    case Kind::Callable: out += "<function " + v.callable()->name + ">"; return;
  }
}

std::string py_str(const Value& v) {
  std::string out;
  append_str(v, out);
  return out;
}

std::string py_repr_value(const Value& v) {
  std::string out;
  append_repr(v, out);
  return out;
}

}  // namespace kapitsa::text::jinja
