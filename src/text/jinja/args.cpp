// ArgReader: binds positional and keyword arguments of builtin filters, tests, methods and
// globals, failing with Python-like messages on missing or unexpected arguments.
#include "text/jinja/interpreter.h"

namespace kapitsa::text::jinja {

bool ArgReader::has(size_t index, const char* name) {
  if (index < args_.args.size()) return true;
  for (const auto& kw : args_.kwargs)
    if (kw.first == name) return true;
  return false;
}

Value ArgReader::get(size_t index, const char* name, Value fallback) {
  if (index < args_.args.size()) {
    for (const auto& kw : args_.kwargs)
      if (kw.first == name) fail("{}() got multiple values for argument '{}'", func_, name);
    return args_.args[index];
  }
  for (size_t i = 0; i < args_.kwargs.size(); ++i) {
    if (args_.kwargs[i].first == name) {
      used_[i] = true;
      return args_.kwargs[i].second;
    }
  }
  return fallback;
}

Value ArgReader::required(size_t index, const char* name) {
  if (!has(index, name)) fail("{}() missing required argument '{}'", func_, name);
  return get(index, name);
}

void ArgReader::finish(size_t max_positional) {
  if (args_.args.size() > max_positional)
    fail("{}() takes at most {} positional argument(s) ({} given)", func_, max_positional, args_.args.size());
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) fail("{}() got an unexpected keyword argument '{}'", func_, args_.kwargs[i].first);
}

}  // namespace kapitsa::text::jinja
