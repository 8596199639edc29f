// Jinja tests (`x is defined`, `x is string`, ...) with the exact Python type checks Jinja makes:
// bool counts as a number, dicts are sequences, Undefined is iterable, `true`/`false` match only
// booleans. Aliases (==, eq, equalto, ...) share one implementation.
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

#include <cmath>
#include <map>

namespace kapitsa::text::jinja {
namespace {

using Test = bool (*)(Interpreter&, const Value&, ArgReader&);

Value one_arg(ArgReader& r, const char* name) {
  Value v = r.required(0, name);
  r.finish(1);
  return v;
}

// str.isupper() / str.islower(): at least one cased character and none of the other case.
bool cased_only(const std::string& s, bool upper) {
  bool cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (upper ? py_is_cased_lower(c) : py_is_cased_upper(c)) return false;
    cased |= upper ? py_is_cased_upper(c) : py_is_cased_lower(c);
  }
  return cased;
}

bool cmp(ArgReader& r, const Value& v, const char* op) { return compare_op(op, v, one_arg(r, "other")); }

const std::map<std::string, Test, std::less<>>& tests() {
  static const std::map<std::string, Test, std::less<>> m = {
      {"defined", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return !v.is_undefined(); }},
      {"undefined", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_undefined(); }},
      {"none", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_none(); }},
      {"boolean", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_bool(); }},
      {"true", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_bool() && v.as_bool(); }},
      {"false", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_bool() && !v.as_bool(); }},
      {"integer", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_int(); }},
      {"float", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_float(); }},
      {"number", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_number(); }},
      {"string", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_string(); }},
      {"mapping", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_dict() && !v.has_call(); }},
      {"sequence", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         return v.is_string() || v.is_list() || (v.is_dict() && !v.has_call());
       }},
      {"iterable", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
       }},
      {"callable", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_callable(); }},
      {"escaped", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return v.is_markup(); }},
      {"lower", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return cased_only(py_str(v), false); }},
      {"upper", [](Interpreter&, const Value& v, ArgReader& r) { r.finish(0); return cased_only(py_str(v), true); }},
      {"odd", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         if (!v.is_int() && !v.is_bool()) fail("odd test needs an integer, got {}", v.type_name());
         return v.as_int() % 2 != 0;
       }},
      {"even", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         if (!v.is_int() && !v.is_bool()) fail("even test needs an integer, got {}", v.type_name());
         return v.as_int() % 2 == 0;
       }},
      {"divisibleby", [](Interpreter&, const Value& v, ArgReader& r) {
         Value n = one_arg(r, "num");
         if (!v.is_number() || !n.is_number()) fail("divisibleby needs numbers");
         if (v.is_float() || n.is_float()) {
           if (n.as_float() == 0) fail("float modulo");
           return std::fmod(v.as_float(), n.as_float()) == 0;
         }
         if (n.as_int() == 0) fail("integer division or modulo by zero");
         return n.as_int() == -1 || v.as_int() % n.as_int() == 0;
       }},
      {"sameas", [](Interpreter&, const Value& v, ArgReader& r) {
         Value o = one_arg(r, "other");
         if (v.kind() != o.kind()) return false;
         switch (v.kind()) {
           case Kind::None: case Kind::Undefined: return true;
           case Kind::Bool: return v.as_bool() == o.as_bool();
           case Kind::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
           case Kind::String: case Kind::Float: return false;
           case Kind::List: return &v.list() == &o.list();
           default: return &v.dict() == &o.dict();
         }
       }},
      {"in", [](Interpreter&, const Value& v, ArgReader& r) { return compare_op("in", v, one_arg(r, "seq")); }},
      {"==", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "=="); }},
      {"eq", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "=="); }},
      {"equalto", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "=="); }},
      {"!=", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "!="); }},
      {"ne", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "!="); }},
      {"<", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "<"); }},
      {"lt", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "<"); }},
      {"lessthan", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "<"); }},
      {"<=", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "<="); }},
      {"le", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, "<="); }},
      {">", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, ">"); }},
      {"gt", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, ">"); }},
      {"greaterthan", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, ">"); }},
      {">=", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, ">="); }},
      {"ge", [](Interpreter&, const Value& v, ArgReader& r) { return cmp(r, v, ">="); }},
      {"filter", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         return v.is_string() && has_filter(v.str());
       }},
      {"test", [](Interpreter&, const Value& v, ArgReader& r) {
         r.finish(0);
         return v.is_string() && has_test(v.str());
       }},
  };
  return m;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool run_test(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '{}'", name);
  ArgReader r(args, name);
  return it->second(in, input, r);
}

}  // namespace kapitsa::text::jinja
