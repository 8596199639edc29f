// Lenient JSON: rewrites bare non-finite literals outside strings before handing text to nlohmann.
#include "base/json.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace kapitsa {
namespace {

// Replaces Infinity, -Infinity and NaN tokens that stand outside string literals.
std::string rewrite_non_finite(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    auto starts = [&](std::string_view word) { return text.substr(i, word.size()) == word; };
    if (starts("-Infinity")) {
      out += R"({"__float__":"-Infinity"})";
      i += 8;
    } else if (starts("Infinity")) {
      out += R"({"__float__":"Infinity"})";
      i += 7;
    } else if (starts("NaN")) {
      out += R"({"__float__":"NaN"})";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Expected<Json> parse_json_lenient(std::string_view text, const std::string& where) {
  try {
    return Json::parse(rewrite_non_finite(text));
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number too large
    // nlohmann's message carries the byte offset; the offset is in the rewritten text, close enough for a person.
    return error("{}: malformed JSON: {}", where, e.what());
  }
}

Expected<Json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("{}: cannot open", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json_lenient(buffer.str(), path);
}

Expected<double> json_number(const Json& value, const std::string& field) {
  if (value.is_number()) return value.get<double>();
  if (value.is_object() && value.contains("__float__") && value["__float__"].is_string()) {
    const std::string s = value["__float__"].get<std::string>();
    if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  return error("{}: expected a number, got {}", field, value.dump());
}

}  // namespace kapitsa
