// Jinja filters as Jinja 3.1 defines them, plus Hugging Face's `tojson` override
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
// Each filter takes its input and the call's arguments; names and defaults follow jinja2/filters.py.
#include "text/jinja/interpreter.h"
#include "text/jinja/json_value.h"
#include "text/jinja/pystr.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kapitsa::text::jinja {
namespace {

using Filter = Value (*)(Interpreter&, const Value&, ArgReader&, CallArgs&);

// attribute="a.b.0": Jinja's make_attrgetter (dotted path, integer parts index lists).
Value get_attribute_path(Interpreter& in, const Value& item, const Value& path) {
  if (path.is_int()) return in.getitem(item, path);
  if (!path.is_string()) fail("attribute must be a string or integer");
  Value v = item;
  for (const std::string& part : py_split(path.str(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits && part.size() < 18 ? in.getitem(v, Value(static_cast<int64_t>(std::stoll(part)))) : in.getitem(v, Value(part));
  }
  return v;
}

Value length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return Value(int64_t{0});
    case Kind::String: return Value(static_cast<int64_t>(utf8_length(v.str())));
    case Kind::List: return Value(static_cast<int64_t>(v.list().size()));
    case Kind::Dict: return Value(static_cast<int64_t>(v.dict().items.size()));
    default: fail("object of type '{}' has no len()", v.type_name());
  }
}

bool truthy_flag(const Value& v) { return v.truthy(); }

// Sort key for sort/unique/min/max/dictsort: lower-cased strings unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

bool less_than(const Value& a, const Value& b) { return compare_op("<", a, b); }

Value do_default(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  Value fallback = r.get(0, "default_value", Value(""));
  bool boolean = truthy_flag(r.get(1, "boolean", Value(false)));
  r.finish(2);
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value do_tojson(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  JsonStyle st;
  st.ensure_ascii = r.get(0, "ensure_ascii", Value(false)).truthy();
  Value indent = r.get(1, "indent", Value::none());
  Value separators = r.get(2, "separators", Value::none());
  st.sort_keys = r.get(3, "sort_keys", Value(false)).truthy();
  r.finish(4);
  if (indent.is_int() || indent.is_bool()) {
    int64_t n = std::clamp<int64_t>(indent.as_int(), 0, 1000);
    st.indent = std::string(static_cast<size_t>(n), ' ');
  } else if (indent.is_string()) {
    st.indent = indent.str();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    fail("tojson indent must be an int or a string");
  }
  if (st.indent) st.item_separator = ",";
  if (!separators.is_none() && !separators.is_undefined()) {
    if (!separators.is_list() || separators.list().size() != 2 || !separators.list()[0].is_string() ||
        !separators.list()[1].is_string())
      fail("tojson separators must be a pair of strings");
    st.item_separator = separators.list()[0].str();
    st.key_separator = separators.list()[1].str();
  }
  std::string out = to_json(v, st);
  in.check_string_size(out.size());
  return Value(std::move(out));
}

Value do_join(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  Value sep = r.get(0, "d", Value(""));
  Value attribute = r.get(1, "attribute", Value::none());
  r.finish(2);
  std::string s = py_str(sep), out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += s;
    first = false;
    out += py_str(attribute.is_none() ? item : get_attribute_path(in, item, attribute));
    in.check_string_size(out.size());
  }
  return Value(std::move(out));
}

Value do_first(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  r.finish(0);
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value do_last(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  r.finish(0);
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value do_items(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  r.finish(0);
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict() || v.has_call()) fail("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, item] : v.dict().items) out.emplace_back(List{k, item}, /*is_tuple=*/true);
  return Value(std::move(out));
}

Value do_trim(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  Value chars = r.get(0, "chars", Value::none());
  r.finish(1);
  std::optional<std::string> set;
  if (chars.is_string()) set = chars.str();
  return Value(py_strip(py_str(v), set, true, true), v.is_markup());
}

Value do_replace(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  Value old = r.required(0, "old"), repl = r.required(1, "new");
  Value count = r.get(2, "count", Value::none());
  r.finish(3);
  int64_t n = count.is_none() ? -1 : count.as_int();
  std::string out = py_replace(py_str(v), py_str(old), py_str(repl), n);
  in.check_string_size(out.size());
  return Value(std::move(out));
}

// Jinja's title(): capitalises after runs of whitespace, '-', '(', '{', '[', '<'.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  bool start = true;
  for (char32_t c : u) {
    bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      utf8_append(out, c);
      start = true;
    } else {
      utf8_append(out, start ? py_upper(c) : py_lower(c));
      start = false;
    }
  }
  return out;
}

Value do_int(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  Value fallback = r.get(0, "default", Value(int64_t{0}));
  Value base_v = r.get(1, "base", Value(int64_t{10}));
  r.finish(2);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    std::string digits;
    for (char c : s)
      if (c != '_') digits.push_back(c);
    int base = static_cast<int>(base_v.as_int());
    if (base < 2 || base > 36) base = 10;
    errno = 0;
    char* end = nullptr;
    long long n = std::strtoll(digits.c_str(), &end, base);
    if (!digits.empty() && end && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(n));
    end = nullptr;
    double f = std::strtod(digits.c_str(), &end);
    if (!digits.empty() && end && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18)
      return Value(static_cast<int64_t>(f));
  }
  return fallback;
}

Value do_float(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  Value fallback = r.get(0, "default", Value(0.0));
  r.finish(1);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value(f);
  }
  return fallback;
}

Value do_round(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  int64_t precision = r.get(0, "precision", Value(int64_t{0})).as_int();
  Value method = r.get(1, "method", Value("common"));
  r.finish(2);
  if (!v.is_number()) fail("round needs a number, got {}", v.type_name());
  if (!method.is_string() || (method.str() != "common" && method.str() != "ceil" && method.str() != "floor"))
    fail("method must be 'common', 'ceil' or 'floor'");
  if (v.is_int() || v.is_bool()) return method.str() == "common" ? Value(v.as_int()) : Value(v.as_float());
  double x = v.as_float();
  precision = std::clamp<int64_t>(precision, -300, 300);
  if (method.str() != "common") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return Value((method.str() == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (!std::isfinite(x)) return Value(x);
  if (precision == 0) return Value(std::nearbyint(x));  // round half to even, like Python
  if (precision < 0) {
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(x / scale) * scale);
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);  // correctly rounded
  return Value(std::strtod(buf, nullptr));
}

Value do_indent(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  Value width = r.get(0, "width", Value(int64_t{4}));
  bool first = r.get(1, "first", Value(false)).truthy();
  bool blank = r.get(2, "blank", Value(false)).truthy();
  r.finish(3);
  std::string indention = width.is_string() ? width.str()
                                            : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1000)), ' ');
  std::string s = py_str(v) + "\n";  // Jinja's quirk: makes splitlines keep a trailing empty line
  std::vector<std::string> lines = py_splitlines(s);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
  }
  if (first) out = indention + out;
  in.check_string_size(out.size());
  return Value(std::move(out));
}

// select / reject / selectattr / rejectattr: keep items whose (attribute's) test result is keep_if.
// Positional args: [attribute,] [test name, test args...]; no test name means truthiness.
Value select_like(Interpreter& in, const Value& v, CallArgs& args, bool with_attr, bool keep_if) {
  if (!v.truthy()) return Value(List{});  // Jinja checks the arguments only for a non-empty input
  size_t next = 0;
  Value attribute;
  if (with_attr) {
    if (args.args.empty()) fail("selectattr/rejectattr need an attribute name");
    attribute = args.args[next++];
  }
  std::string test;
  CallArgs test_args;
  if (next < args.args.size()) {
    if (!args.args[next].is_string()) fail("test name must be a string");
    test = args.args[next++].str();
    if (!has_test(test)) fail("no test named '{}'", test);
    test_args.args.assign(args.args.begin() + static_cast<std::ptrdiff_t>(next), args.args.end());
  }
  test_args.kwargs = args.kwargs;
  List out;
  for (const Value& item : in.iterate(v)) {
    in.charge(1);
    Value subject = with_attr ? get_attribute_path(in, item, attribute) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.truthy();
    } else {
      CallArgs copy = test_args;
      pass = in.apply_test(test, subject, copy);
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value(std::move(out));
}

Value do_map(Interpreter& in, const Value& v, ArgReader&, CallArgs& args) {
  List out;
  if (!v.truthy()) return Value(std::move(out));  // as select_like
  for (const auto& kw : args.kwargs) {
    if (kw.first == "attribute") {
      Value fallback;
      for (const auto& k2 : args.kwargs)
        if (k2.first == "default") fallback = k2.second;
        else if (k2.first != "attribute") fail("map() got an unexpected keyword argument '{}'", k2.first);
      if (!args.args.empty()) fail("map() with attribute= takes no positional arguments");
      for (const Value& item : in.iterate(v)) {
        Value x = get_attribute_path(in, item, kw.second);
        out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
      }
      return Value(std::move(out));
    }
  }
  if (args.args.empty() || !args.args[0].is_string()) fail("map() needs a filter name or attribute=");
  std::string filter = args.args[0].str();
  if (!has_filter(filter)) fail("no filter named '{}'", filter);
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const Value& item : in.iterate(v)) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(filter, item, copy));
  }
  return Value(std::move(out));
}

Value do_sort(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  bool reverse = r.get(0, "reverse", Value(false)).truthy();
  bool case_sensitive = r.get(1, "case_sensitive", Value(false)).truthy();
  Value attribute = r.get(2, "attribute", Value::none());
  r.finish(3);
  std::vector<Value> items = in.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items)
    keyed.emplace_back(sort_key(attribute.is_none() ? item : get_attribute_path(in, item, attribute), case_sensitive), item);
  in.charge(static_cast<int64_t>(keyed.size()) * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value(std::move(out));
}

Value do_dictsort(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  Value by = r.get(1, "by", Value("key"));
  bool reverse = r.get(2, "reverse", Value(false)).truthy();
  r.finish(3);
  if (!v.is_dict()) fail("You can only sort by either 'key' or 'value' of a mapping");
  size_t pos = 0;
  if (by.is_string() && by.str() == "value") pos = 1;
  else if (!by.is_string() || by.str() != "key") fail("You can only sort by either 'key' or 'value'");
  std::vector<std::pair<Value, Value>> items = v.dict().items;
  in.charge(static_cast<int64_t>(items.size()) * 8);
  std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
    Value ka = sort_key(pos ? a.second : a.first, case_sensitive);
    Value kb = sort_key(pos ? b.second : b.first, case_sensitive);
    return reverse ? less_than(kb, ka) : less_than(ka, kb);
  });
  List out;
  for (auto& [k, item] : items) out.emplace_back(List{k, item}, /*is_tuple=*/true);
  return Value(std::move(out));
}

Value do_unique(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = r.get(1, "attribute", Value::none());
  r.finish(2);
  List out, seen;
  for (const Value& item : in.iterate(v)) {
    Value key = sort_key(attribute.is_none() ? item : get_attribute_path(in, item, attribute), case_sensitive);
    bool dup = false;
    for (const Value& s : seen) dup |= py_equal(s, key);
    in.charge(static_cast<int64_t>(seen.size()));
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, ArgReader& r, bool want_max) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = r.get(1, "attribute", Value::none());
  r.finish(2);
  std::vector<Value> items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const Value* best = &items[0];
  Value best_key = sort_key(attribute.is_none() ? items[0] : get_attribute_path(in, items[0], attribute), case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(attribute.is_none() ? items[i] : get_attribute_path(in, items[i], attribute), case_sensitive);
    if (want_max ? less_than(best_key, key) : less_than(key, best_key)) {
      best = &items[i];
      best_key = key;
    }
  }
  return *best;
}

Value do_sum(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  Value attribute = r.get(0, "attribute", Value::none());
  Value total = r.get(1, "start", Value(int64_t{0}));
  r.finish(2);
  for (const Value& item : in.iterate(v))
    total = binary_op(in, "+", total, attribute.is_none() ? item : get_attribute_path(in, item, attribute));
  return total;
}

Value do_reverse(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  r.finish(0);
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value(List(std::move(items)));
}

Value do_wordcount(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  r.finish(0);
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(py_str(v))) {
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value(words);
}

Value do_truncate(Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
  int64_t length = r.get(0, "length", Value(int64_t{255})).as_int();
  bool killwords = r.get(1, "killwords", Value(false)).truthy();
  std::string end = py_str(r.get(2, "end", Value("...")));
  int64_t leeway = r.get(3, "leeway", Value(int64_t{5})).as_int();
  r.finish(4);
  std::u32string s = utf8_decode(py_str(v));
  std::u32string e = utf8_decode(end);
  if (length < static_cast<int64_t>(e.size())) fail("expected length >= {}, got {}", e.size(), length);
  if (leeway < 0) fail("expected leeway >= 0, got {}", leeway);
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value(utf8_encode(s));
  std::u32string cut = s.substr(0, static_cast<size_t>(length) - e.size());
  if (!killwords) {
    size_t sp = cut.rfind(U' ');
    if (sp != std::u32string::npos) cut.resize(sp);
  }
  return Value(utf8_encode(cut) + end);
}

Value do_batch(Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
  int64_t size = r.required(0, "linecount").as_int();
  Value fill = r.get(1, "fill_with", Value::none());
  r.finish(2);
  if (size <= 0) fail("batch size must be positive");
  List out, current;
  for (const Value& item : in.iterate(v)) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == size) {
      out.emplace_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(current.size()) < size) current.push_back(fill);
    out.emplace_back(std::move(current));
  }
  return Value(std::move(out));
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> m = {
      {"default", do_default},
      {"d", do_default},
      {"tojson", do_tojson},
      {"join", do_join},
      {"first", do_first},
      {"last", do_last},
      {"items", do_items},
      {"trim", do_trim},
      {"replace", do_replace},
      {"int", do_int},
      {"float", do_float},
      {"round", do_round},
      {"indent", do_indent},
      {"map", do_map},
      {"sort", do_sort},
      {"dictsort", do_dictsort},
      {"unique", do_unique},
      {"sum", do_sum},
      {"reverse", do_reverse},
      {"wordcount", do_wordcount},
      {"truncate", do_truncate},
      {"batch", do_batch},
      {"length", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return length_of(v); }},
      {"count", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return length_of(v); }},
      {"string", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         r.finish(0);
         return v.is_string() ? v : Value(py_str(v));
       }},
      {"safe", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(py_str(v), true); }},
      {"escape", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         r.finish(0);
         return v.is_markup() ? v : Value(html_escape(py_str(v)), true);
       }},
      {"e", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         r.finish(0);
         return v.is_markup() ? v : Value(html_escape(py_str(v)), true);
       }},
      {"forceescape", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         r.finish(0);
         return Value(html_escape(py_str(v)), true);
       }},
      {"upper", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(py_upper(py_str(v))); }},
      {"lower", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(py_lower(py_str(v))); }},
      {"capitalize", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(py_capitalize(py_str(v))); }},
      {"title", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(jinja_title(py_str(v))); }},
      {"list", [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(List(in.iterate(v))); }},
      {"abs", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) {
         r.finish(0);
         if (v.is_int() || v.is_bool()) {
           if (v.as_int() == INT64_MIN) fail("integer overflow");
           return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         }
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         fail("bad operand type for abs(): '{}'", v.type_name());
       }},
      {"attr", [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
         Value name = r.required(0, "name");
         r.finish(1);
         if (!name.is_string()) fail("attribute name must be a string");
         return in.getattr(v, name.str());
       }},
      {"max", [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) { return min_max(in, v, r, true); }},
      {"min", [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) { return min_max(in, v, r, false); }},
      {"select", [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) { return select_like(in, v, a, false, true); }},
      {"reject", [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) { return select_like(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) { return select_like(in, v, a, true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) { return select_like(in, v, a, true, false); }},
      {"center", [](Interpreter& in, const Value& v, ArgReader& r, CallArgs&) {
         int64_t width = r.get(0, "width", Value(int64_t{80})).as_int();
         r.finish(1);
         std::string s = py_str(v);
         int64_t len = static_cast<int64_t>(utf8_length(s));
         if (width > in.limits().max_range) fail("width {} is too large", width);
         if (width <= len) return Value(s);
         int64_t total = width - len, left = total / 2 + (total & width & 1);
         return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
       }},
      {"pprint", [](Interpreter&, const Value& v, ArgReader& r, CallArgs&) { r.finish(0); return Value(py_repr_value(v)); }},
      {"format", [](Interpreter& in, const Value& v, ArgReader&, CallArgs& a) {
         if (!a.kwargs.empty()) fail("format filter keyword arguments are not supported");
         return binary_op(in, "%", Value(py_str(v)), Value(List(a.args)));
       }},
  };
  return m;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value run_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '{}'", name);
  ArgReader r(args, name);
  return it->second(in, input, r, args);
}

}  // namespace kapitsa::text::jinja
