// Value: the Jinja interpreter's dynamic value, modelled on the Python objects a template sees
// (Undefined, None, bool, int, float, str, list, dict, namespace, callable). Dicts keep insertion
// order (tojson and iteration depend on it). Lists and dicts are shared and immutable once built
// (Hugging Face renders in an ImmutableSandboxedEnvironment); only namespaces mutate, in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kapitsa::text::jinja {

class Interpreter;
class Value;
using List = std::vector<Value>;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

struct Dict;

class Value {
 public:
  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s, bool markup = false);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List items, bool is_tuple = false);
  Value(std::shared_ptr<Dict> dict, bool is_namespace = false);
  Value(std::shared_ptr<const Callable> callable);

  // hint says why it is undefined ("'x' is undefined", "'dict object' has no attribute 'y'").
  static Value undefined(std::string hint);
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable || (kind_ == Kind::Dict && has_call()); }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_tuple() const { return kind_ == Kind::List && markup_; }  // prints as (a, b); else a list

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_float() const;  // int, bool or float as double
  const std::string& str() const { return *s_; }  // String only
  std::string undefined_hint() const { return kind_ == Kind::Undefined && s_ ? *s_ : std::string(); }
  const List& list() const { return *l_; }
  const Dict& dict() const { return *d_; }
  Dict& mutable_dict() const { return *d_; }  // namespaces only
  const std::shared_ptr<const Callable>& callable() const { return c_; }
  bool has_call() const;
  int depth() const { return depth_; }  // nesting depth of lists/dicts (0 for scalars)

  // Python truthiness.
  bool truthy() const;
  // Python type name as Jinja error messages show it ("str", "list", "dict", "NoneType", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool markup_ = false;  // String: Markup (|safe); List: a tuple
  uint16_t depth_ = 0;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<const Callable> c_;
};

// An ordered dict with Python key equality (1 == 1.0 == True). Linear lookup: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  std::shared_ptr<const Callable> call;  // set on loop objects: `loop(children)` in recursive loops

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

std::shared_ptr<Dict> make_dict();

// Lists and dicts nest at most this deep (printing, comparing and freeing them recurse).
inline constexpr int kMaxValueDepth = 200;

// Python ==, with int/float/bool promotion and deep comparison of lists and dicts.
bool py_equal(const Value& a, const Value& b);
// str(v) as Python prints it (None, True, 1.0, ['a', 1], {'k': 'v'}); Undefined renders as "".
std::string py_str(const Value& v);
// repr(v) as Python prints it.
std::string py_repr_value(const Value& v);

}  // namespace kapitsa::text::jinja
