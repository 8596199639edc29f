// JSON ↔ Value. from_json keeps object key order (nlohmann::ordered_json), so tools and arguments
// render in the order the client sent them. to_json is Python's json.dumps as Hugging Face's
// `tojson` filter calls it: ensure_ascii=False, separators ", " / ": " (",", ": " with indent),
// floats as repr(), no HTML escaping.
#pragma once

#include "text/jinja/value.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kapitsa::text::jinja {

// Throws TemplateError when the document nests deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);

struct JsonStyle {
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Throws TemplateError for values JSON cannot hold (Undefined, namespaces, callables).
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace kapitsa::text::jinja
