// Global functions a template can call: Jinja's range, namespace, dict, joiner, and Hugging Face's
// raise_exception (fails the render with the template's own message) and strftime_now (local time;
// the only non-deterministic input a template can see).
#include "text/jinja/interpreter.h"

#include <ctime>
#include <map>

namespace kapitsa::text::jinja {
namespace {

Value range_fn(Interpreter& in, CallArgs& args) {
  if (!args.kwargs.empty()) fail("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) fail("range expected 1 to 3 arguments, got {}", args.args.size());
  for (const Value& a : args.args)
    if (!a.is_int() && !a.is_bool()) fail("'{}' object cannot be interpreted as an integer", a.type_name());
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = args.args[0].as_int();
  } else {
    start = args.args[0].as_int();
    stop = args.args[1].as_int();
    if (args.args.size() == 3) step = args.args[2].as_int();
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  // Count without overflow: the item count must fit the limit anyway.
  long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  long double count = span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -static_cast<long double>(step));
  if (count > static_cast<long double>(in.limits().max_range)) fail("range() of {} items exceeds the limit", static_cast<double>(count));
  List out;
  int64_t n = static_cast<int64_t>(count);
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
  in.charge(n);
  return Value(std::move(out));
}

Value mapping_from(CallArgs& args, const char* func) {
  auto d = make_dict();
  if (args.args.size() > 1) fail("{}() expected at most 1 positional argument", func);
  if (!args.args.empty()) {
    const Value& init = args.args[0];
    if (init.is_dict()) {
      d->items = init.dict().items;
    } else if (init.is_list()) {
      for (const Value& pair : init.list()) {
        if (!pair.is_list() || pair.list().size() != 2) fail("{}() sequence elements must be pairs", func);
        d->set(pair.list()[0], pair.list()[1]);
      }
    } else {
      fail("{}() argument must be a mapping", func);
    }
  }
  for (auto& [k, v] : args.kwargs) d->set(Value(k), v);
  return Value(d);
}

Value namespace_fn(Interpreter& in, CallArgs& args) {
  Value m = mapping_from(args, "namespace");
  auto d = make_dict();
  d->items = m.dict().items;
  in.track_namespace(d);
  return Value(d, /*is_namespace=*/true);
}

Value dict_fn(Interpreter&, CallArgs& args) { return mapping_from(args, "dict"); }

Value raise_exception_fn(Interpreter&, CallArgs& args) {
  std::string message = args.args.empty() ? std::string("raise_exception() called") : py_str(args.args[0]);
  throw TemplateError(message);
}

Value strftime_now_fn(Interpreter&, CallArgs& args) {
  if (args.args.size() != 1 || !args.args[0].is_string()) fail("strftime_now() takes one format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string& format = args.args[0].str();
  if (format.size() > 1024) fail("strftime_now() format is too long");
  std::string buffer(format.size() * 16 + 256, '\0');
  size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &local);
  buffer.resize(n);
  return Value(std::move(buffer));
}

Value joiner_fn(Interpreter&, CallArgs& args) {
  std::string sep = args.args.empty() ? std::string(", ") : py_str(args.args[0]);
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(sep);
  });
}

}  // namespace

Value find_global(const std::string& name) {
  static const std::map<std::string, Value, std::less<>> globals = {
      {"range", Value::function("range", range_fn)},
      {"namespace", Value::function("namespace", namespace_fn)},
      {"dict", Value::function("dict", dict_fn)},
      {"raise_exception", Value::function("raise_exception", raise_exception_fn)},
      {"strftime_now", Value::function("strftime_now", strftime_now_fn)},
      {"joiner", Value::function("joiner", joiner_fn)},
  };
  auto it = globals.find(name);
  return it == globals.end() ? Value() : it->second;
}

}  // namespace kapitsa::text::jinja
