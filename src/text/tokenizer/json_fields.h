// Tolerant field readers for tokenizer.json objects: a missing or null field gives the default, so
// files written by older and newer `tokenizers` versions (which add/omit fields) both load.
#pragma once

#include "base/json.h"

#include <string>

namespace kapitsa::text::detail {

inline bool json_bool(const Json& object, const char* key, bool fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

inline std::string json_string(const Json& object, const char* key, const std::string& fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace kapitsa::text::detail
