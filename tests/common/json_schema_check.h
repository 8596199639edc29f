// Test-only JSON Schema validator: just the keywords the constrained-decoding tests use (type incl.
// lists, properties/required/additionalProperties, items/prefixItems/minItems/maxItems, enum, const,
// minLength/maxLength (in code points), anyOf/oneOf (as anyOf), allOf, $ref to #/...). Not a general
// validator: other keywords (pattern, minimum, format, …) are ignored, exactly as the grammar does.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kapitsa::testing {

// Empty when `value` is valid against `schema`; otherwise what failed and where (a JSON path).
inline std::string schema_violation(const nlohmann::json& value, const nlohmann::json& schema,
                                    const nlohmann::json& root, const std::string& path = "$") {
  using nlohmann::json;
  if (schema.is_boolean()) return schema.get<bool>() ? "" : path + ": schema false";
  if (!schema.is_object()) return "";
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"].get<std::string>();
    return schema_violation(value, ref == "#" ? root : root.at(json::json_pointer(ref.substr(1))), root, path);
  }
  if (schema.contains("const") && value != schema["const"]) return path + ": not the const " + schema["const"].dump();
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == value;
    if (!found) return path + ": " + value.dump() + " not in enum";
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (schema.contains(key)) {
      std::string why;
      bool any = false;
      for (const json& alt : schema[key]) {
        const std::string v = schema_violation(value, alt, root, path);
        if (v.empty()) any = true;
        else why += " [" + v + "]";
      }
      if (!any) return path + ": no alternative of " + key + " matches:" + why;
    }
  if (schema.contains("allOf"))
    for (const json& part : schema["allOf"]) {
      const std::string v = schema_violation(value, part, root, path);
      if (!v.empty()) return v;
    }
  if (schema.contains("type")) {
    auto is = [&](const std::string& t) {
      if (t == "null") return value.is_null();
      if (t == "boolean") return value.is_boolean();
      if (t == "integer") return value.is_number_integer() || (value.is_number_float() && value.get<double>() == static_cast<double>(static_cast<int64_t>(value.get<double>())));
      if (t == "number") return value.is_number();
      if (t == "string") return value.is_string();
      if (t == "array") return value.is_array();
      if (t == "object") return value.is_object();
      return false;
    };
    bool ok = false;
    if (schema["type"].is_string()) ok = is(schema["type"].get<std::string>());
    else
      for (const json& t : schema["type"]) ok = ok || is(t.get<std::string>());
    if (!ok) return path + ": " + value.dump() + " is not of type " + schema["type"].dump();
  }
  if (value.is_string()) {
    // Length in code points.
    size_t n = 0;
    for (unsigned char c : value.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return path + ": shorter than minLength";
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return path + ": longer than maxLength";
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>()) return path + ": fewer than minItems";
    if (schema.contains("maxItems") && value.size() > schema["maxItems"].get<size_t>()) return path + ": more than maxItems";
    size_t start = 0;
    if (schema.contains("prefixItems")) {
      const json& p = schema["prefixItems"];
      for (size_t i = 0; i < p.size() && i < value.size(); ++i) {
        const std::string v = schema_violation(value[i], p[i], root, path + "[" + std::to_string(i) + "]");
        if (!v.empty()) return v;
      }
      start = p.size();
    }
    if (schema.contains("items"))
      for (size_t i = start; i < value.size(); ++i) {
        const std::string v = schema_violation(value[i], schema["items"], root, path + "[" + std::to_string(i) + "]");
        if (!v.empty()) return v;
      }
  }
  if (value.is_object()) {
    if (schema.contains("required"))
      for (const json& r : schema["required"])
        if (!value.contains(r.get<std::string>())) return path + ": missing required " + r.dump();
    const json props = schema.value("properties", json::object());
    for (const auto& [k, v] : value.items()) {
      if (props.contains(k)) {
        const std::string why = schema_violation(v, props[k], root, path + "." + k);
        if (!why.empty()) return why;
      } else if (schema.contains("additionalProperties")) {
        const std::string why = schema_violation(v, schema["additionalProperties"], root, path + "." + k);
        if (!why.empty()) return path + ": additional property " + k + ": " + why;
      }
    }
  }
  return "";
}

inline std::string schema_violation(const nlohmann::json& value, const nlohmann::json& schema) {
  return schema_violation(value, schema, schema);
}

}  // namespace kapitsa::testing
