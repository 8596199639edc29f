// Methods templates call on values: str (startswith, split, strip, replace, format, ...),
// dict (items, keys, values, get) and list (index, count). Mutating methods are absent on purpose:
// Hugging Face's ImmutableSandboxedEnvironment refuses them, so calling one is an error here too.
#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

namespace kapitsa::text::jinja {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& args);
// Hashed: a template reads `message.role` and the like thousands of times a render, and each read of a
// dict's attribute asks for a method of that name first (Jinja's order).
using MethodTable = std::unordered_map<std::string_view, Method>;

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) fail("{} must be str or None, not {}", what, v.type_name());
  return v.str();
}

int64_t opt_int(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool()) fail("'{}' object cannot be interpreted as an integer", v.type_name());
  return v.as_int();
}

// Python's start/end adjustment for find/count/startswith over n code points.
void adjust(int64_t n, int64_t& start, int64_t& end) {
  if (start < 0) start = std::max<int64_t>(0, start + n);
  if (end < 0) end = std::max<int64_t>(0, end + n);
  end = std::min(end, n);
}

struct Span {  // the [start, end) code-point window of a find-like call, as UTF-8
  std::u32string text;
  int64_t start, end;
};

Span window(const Value& self, ArgReader& r, size_t first) {
  Span s{utf8_decode(self.str()), 0, 0};
  int64_t n = static_cast<int64_t>(s.text.size());
  s.start = opt_int(r.get(first, "start"), 0);
  s.end = opt_int(r.get(first + 1, "end"), n);
  adjust(n, s.start, s.end);
  return s;
}

int64_t find_in(const Span& s, const std::u32string& sub, bool reverse) {
  if (s.start > s.end) return -1;
  std::u32string_view view = std::u32string_view(s.text).substr(static_cast<size_t>(s.start),
                                                                  static_cast<size_t>(s.end - s.start));
  size_t at = reverse ? view.rfind(sub) : view.find(sub);
  return at == std::u32string_view::npos ? -1 : static_cast<int64_t>(at) + s.start;
}

Value affix(Interpreter&, const Value& self, CallArgs& args, bool prefix) {
  ArgReader r(args, prefix ? "startswith" : "endswith");
  Value what = r.required(0, prefix ? "prefix" : "suffix");
  Span s = window(self, r, 1);
  r.finish(3);
  std::vector<Value> options = what.is_list() ? what.list() : std::vector<Value>{what};
  for (const Value& o : options) {
    if (!o.is_string()) fail("{} first arg must be str or a tuple of str, not {}",
                             prefix ? "startswith" : "endswith", o.type_name());
    std::u32string a = utf8_decode(o.str());
    if (s.start > s.end) continue;
    int64_t len = s.end - s.start;
    if (static_cast<int64_t>(a.size()) > len) continue;
    size_t pos = prefix ? static_cast<size_t>(s.start) : static_cast<size_t>(s.end) - a.size();
    if (s.text.compare(pos, a.size(), a) == 0) return Value(true);
  }
  return Value(false);
}

Value strip_like(const Value& self, CallArgs& args, const char* name, bool left, bool right) {
  ArgReader r(args, name);
  auto chars = opt_str(r.get(0, "chars"), "chars");
  r.finish(1);
  return Value(py_strip(self.str(), chars, left, right), self.is_markup());
}

Value split_like(Interpreter& in, const Value& self, CallArgs& args, bool reverse) {
  ArgReader r(args, reverse ? "rsplit" : "split");
  auto sep = opt_str(r.get(0, "sep"), "sep");
  int64_t maxsplit = opt_int(r.get(1, "maxsplit"), -1);
  r.finish(2);
  if (sep && sep->empty()) fail("empty separator");
  auto parts = reverse ? py_rsplit(self.str(), sep, maxsplit) : py_split(self.str(), sep, maxsplit);
  in.charge(static_cast<int64_t>(parts.size()));
  List out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value(std::move(out));
}

Value format_method(Interpreter& in, const Value& self, CallArgs& args) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}' ) {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else fail("Single '}}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) fail("Single '{{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string conversion;
    if (size_t colon = field.find(':'); colon != std::string::npos) field.resize(colon);  // spec ignored
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.args.size()) fail("Replacement index {} out of range", auto_index);
      v = args.args[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t idx = field.size() > 6 ? SIZE_MAX : std::stoul(field);
      if (idx >= args.args.size()) fail("Replacement index {} out of range", field);
      v = args.args[idx];
    } else {
      bool found = false;
      for (const auto& [k, kv] : args.kwargs)
        if (k == field) { v = kv; found = true; }
      if (!found) fail("KeyError: '{}'", field);
    }
    out += conversion == "r" ? py_repr_value(v) : py_str(v);
    in.check_string_size(out.size());
  }
  return Value(std::move(out));
}

Value join_method(Interpreter& in, const Value& self, CallArgs& args) {
  ArgReader r(args, "join");
  Value items = r.required(0, "iterable");
  r.finish(1);
  std::string out;
  bool first = true;
  for (const Value& v : in.iterate(items)) {
    if (!v.is_string()) fail("sequence item: expected str instance, {} found", v.type_name());
    if (!first) out += self.str();
    first = false;
    out += v.str();
    in.check_string_size(out.size());
  }
  return Value(std::move(out));
}

template <bool (*Pred)(char32_t)>
Value all_chars(const Value& self) {
  std::u32string u = utf8_decode(self.str());
  if (u.empty()) return Value(false);
  for (char32_t c : u)
    if (!Pred(c)) return Value(false);
  return Value(true);
}

Value case_check(const Value& self, bool upper) {
  bool cased = false;
  for (char32_t c : utf8_decode(self.str())) {
    if (upper ? py_is_cased_lower(c) : py_is_cased_upper(c)) return Value(false);
    cased |= upper ? py_is_cased_upper(c) : py_is_cased_lower(c);
  }
  return Value(cased);
}

Value pad(Interpreter& in, const Value& self, CallArgs& args, const char* name, int align) {
  ArgReader r(args, name);
  int64_t width = opt_int(r.required(0, "width"), 0);
  Value fill_v = r.get(1, "fillchar", Value(" "));
  r.finish(2);
  if (!fill_v.is_string() || utf8_length(fill_v.str()) != 1) fail("The fill character must be exactly one character long");
  int64_t len = static_cast<int64_t>(utf8_length(self.str()));
  if (width > in.limits().max_range) fail("width {} is too large", width);
  if (width <= len) return self;
  int64_t total = width - len;
  int64_t left = align < 0 ? 0 : align > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill_v.str();
  out += self.str();
  for (int64_t i = 0; i < total - left; ++i) out += fill_v.str();
  in.check_string_size(out.size());
  return Value(std::move(out));
}

const MethodTable& string_methods() {
  static const MethodTable m = {
      {"startswith", [](Interpreter& in, const Value& s, CallArgs& a) { return affix(in, s, a, true); }},
      {"endswith", [](Interpreter& in, const Value& s, CallArgs& a) { return affix(in, s, a, false); }},
      {"strip", [](Interpreter&, const Value& s, CallArgs& a) { return strip_like(s, a, "strip", true, true); }},
      {"lstrip", [](Interpreter&, const Value& s, CallArgs& a) { return strip_like(s, a, "lstrip", true, false); }},
      {"rstrip", [](Interpreter&, const Value& s, CallArgs& a) { return strip_like(s, a, "rstrip", false, true); }},
      {"split", [](Interpreter& in, const Value& s, CallArgs& a) { return split_like(in, s, a, false); }},
      {"rsplit", [](Interpreter& in, const Value& s, CallArgs& a) { return split_like(in, s, a, true); }},
      {"splitlines", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader(a, "splitlines").finish(0);
         List out;
         for (auto& line : py_splitlines(s.str())) out.emplace_back(std::move(line));
         return Value(std::move(out));
       }},
      {"replace", [](Interpreter& in, const Value& s, CallArgs& a) {
         ArgReader r(a, "replace");
         Value old = r.required(0, "old"), repl = r.required(1, "new");
         int64_t count = opt_int(r.get(2, "count"), -1);
         r.finish(3);
         if (!old.is_string() || !repl.is_string()) fail("replace() arguments must be str");
         std::string out = py_replace(s.str(), old.str(), repl.str(), count);
         in.check_string_size(out.size());
         return Value(std::move(out), s.is_markup());
       }},
      {"upper", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "upper").finish(0); return Value(py_upper(s.str()), s.is_markup()); }},
      {"lower", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "lower").finish(0); return Value(py_lower(s.str()), s.is_markup()); }},
      {"title", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "title").finish(0); return Value(py_title(s.str()), s.is_markup()); }},
      {"capitalize", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "capitalize").finish(0); return Value(py_capitalize(s.str()), s.is_markup()); }},
      {"swapcase", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "swapcase").finish(0); return Value(py_swapcase(s.str())); }},
      {"find", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "find");
         Value sub = r.required(0, "sub");
         if (!sub.is_string()) fail("must be str, not {}", sub.type_name());
         Span w = window(s, r, 1);
         r.finish(3);
         return Value(find_in(w, utf8_decode(sub.str()), false));
       }},
      {"rfind", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "rfind");
         Value sub = r.required(0, "sub");
         if (!sub.is_string()) fail("must be str, not {}", sub.type_name());
         Span w = window(s, r, 1);
         r.finish(3);
         return Value(find_in(w, utf8_decode(sub.str()), true));
       }},
      {"index", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "index");
         Value sub = r.required(0, "sub");
         if (!sub.is_string()) fail("must be str, not {}", sub.type_name());
         Span w = window(s, r, 1);
         r.finish(3);
         int64_t at = find_in(w, utf8_decode(sub.str()), false);
         if (at < 0) fail("substring not found");
         return Value(at);
       }},
      {"count", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "count");
         Value sub = r.required(0, "sub");
         if (!sub.is_string()) fail("must be str, not {}", sub.type_name());
         Span w = window(s, r, 1);
         r.finish(3);
         std::u32string needle = utf8_decode(sub.str());
         if (w.start > w.end) return Value(int64_t{0});
         if (needle.empty()) return Value(w.end - w.start + 1);
         int64_t n = 0;
         for (size_t p = static_cast<size_t>(w.start);;) {
           size_t at = w.text.find(needle, p);
           if (at == std::u32string::npos || at + needle.size() > static_cast<size_t>(w.end)) break;
           ++n;
           p = at + needle.size();
         }
         return Value(n);
       }},
      {"format", format_method},
      {"join", join_method},
      {"isdigit", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "isdigit").finish(0); return all_chars<py_isdigit>(s); }},
      {"isalpha", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "isalpha").finish(0); return all_chars<py_isalpha>(s); }},
      {"isalnum", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "isalnum").finish(0); return all_chars<py_isalnum>(s); }},
      {"isspace", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "isspace").finish(0); return all_chars<py_isspace>(s); }},
      {"isupper", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "isupper").finish(0); return case_check(s, true); }},
      {"islower", [](Interpreter&, const Value& s, CallArgs& a) { ArgReader(a, "islower").finish(0); return case_check(s, false); }},
      {"center", [](Interpreter& in, const Value& s, CallArgs& a) { return pad(in, s, a, "center", 0); }},
      {"ljust", [](Interpreter& in, const Value& s, CallArgs& a) { return pad(in, s, a, "ljust", -1); }},
      {"rjust", [](Interpreter& in, const Value& s, CallArgs& a) { return pad(in, s, a, "rjust", 1); }},
      {"removeprefix", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "removeprefix");
         Value p = r.required(0, "prefix");
         r.finish(1);
         if (!p.is_string()) fail("removeprefix() argument must be str");
         return s.str().rfind(p.str(), 0) == 0 ? Value(s.str().substr(p.str().size())) : s;
       }},
      {"removesuffix", [](Interpreter&, const Value& s, CallArgs& a) {
         ArgReader r(a, "removesuffix");
         Value p = r.required(0, "suffix");
         r.finish(1);
         if (!p.is_string()) fail("removesuffix() argument must be str");
         const std::string& x = s.str();
         bool ends = !p.str().empty() && x.size() >= p.str().size() &&
                     x.compare(x.size() - p.str().size(), p.str().size(), p.str()) == 0;
         return ends ? Value(x.substr(0, x.size() - p.str().size())) : s;
       }},
  };
  return m;
}

List dict_items(const Value& d) {
  List out;
  for (const auto& [k, v] : d.dict().items) out.emplace_back(List{k, v}, /*is_tuple=*/true);
  return out;
}

const MethodTable& dict_methods() {
  static const MethodTable m = {
      {"items", [](Interpreter&, const Value& d, CallArgs& a) { ArgReader(a, "items").finish(0); return Value(dict_items(d)); }},
      {"keys", [](Interpreter&, const Value& d, CallArgs& a) {
         ArgReader(a, "keys").finish(0);
         List out;
         for (const auto& kv : d.dict().items) out.push_back(kv.first);
         return Value(std::move(out));
       }},
      {"values", [](Interpreter&, const Value& d, CallArgs& a) {
         ArgReader(a, "values").finish(0);
         List out;
         for (const auto& kv : d.dict().items) out.push_back(kv.second);
         return Value(std::move(out));
       }},
      {"get", [](Interpreter&, const Value& d, CallArgs& a) {
         ArgReader r(a, "get");
         Value key = r.required(0, "key");
         Value fallback = r.get(1, "default", Value::none());
         r.finish(2);
         const Value* v = d.dict().find(key);
         return v ? *v : fallback;
       }},
      {"copy", [](Interpreter&, const Value& d, CallArgs& a) {
         ArgReader(a, "copy").finish(0);
         auto c = make_dict();
         c->items = d.dict().items;
         return Value(c);
       }},
  };
  return m;
}

const MethodTable& list_methods() {
  static const MethodTable m = {
      {"index", [](Interpreter&, const Value& l, CallArgs& a) {
         ArgReader r(a, "index");
         Value x = r.required(0, "value");
         r.finish(1);
         for (size_t i = 0; i < l.list().size(); ++i)
           if (py_equal(l.list()[i], x)) return Value(static_cast<int64_t>(i));
         fail("{} is not in list", py_repr_value(x));
       }},
      {"count", [](Interpreter&, const Value& l, CallArgs& a) {
         ArgReader r(a, "count");
         Value x = r.required(0, "value");
         r.finish(1);
         int64_t n = 0;
         for (const Value& v : l.list()) n += py_equal(v, x);
         return Value(n);
       }},
  };
  return m;
}

}  // namespace

Value find_method(const Value& obj, const std::string& name) {
  const MethodTable* table = nullptr;
  if (obj.is_string()) table = &string_methods();
  else if (obj.is_dict()) table = &dict_methods();
  else if (obj.is_list()) table = &list_methods();
  if (!table) return Value();
  auto it = table->find(name);
  if (it == table->end()) {
    // The sandbox's refusals: methods that would change a value the template was given.
    static const std::unordered_set<std::string_view> unsafe_dict = {"pop", "popitem", "setdefault", "update", "clear"};
    static const std::unordered_set<std::string_view> unsafe_list = {"append", "extend", "insert", "pop",
                                                                     "remove", "reverse", "sort", "clear"};
    const bool unsafe = obj.is_dict() ? unsafe_dict.contains(name) : obj.is_list() && unsafe_list.contains(name);
    if (unsafe)
      return Value::function(name, [name, type = obj.type_name()](Interpreter&, CallArgs&) -> Value {
        fail("SecurityError: access to attribute '{}' of '{}' object is unsafe", name, type);
      });
    return Value();
  }
  Method method = it->second;
  Value self = obj;
  return Value::function(name, [method, self](Interpreter& in, CallArgs& args) { return method(in, self, args); });
}

}  // namespace kapitsa::text::jinja
