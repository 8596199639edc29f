// JSON ↔ Value (see json_value.h).
#include "text/jinja/json_value.h"

#include "text/jinja/error.h"
#include "text/jinja/pystr.h"

#include <algorithm>
#include <cmath>

namespace kapitsa::text::jinja {

static Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("JSON nests deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = make_dict();
      d->items.reserve(j.size());
      // A JSON object's keys are unique already: appended, not looked up first as set() does.
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(Value(it.key()), from_json_at(it.value(), depth + 1));
      return Value(d);
    }
    default: fail("unsupported JSON value");
  }
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else if (c >= 0x80 && ensure_ascii) {
          size_t len = (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : (c >= 0xC0) ? 2 : 1;
          std::u32string cp = utf8_decode(std::string_view(s).substr(i, len));
          i += len - 1;
          for (char32_t u : cp) {
            if (u >= 0x10000) {
              u -= 0x10000;
              out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
            } else {
              out += fmt::format("\\u{:04x}", static_cast<unsigned>(u));
            }
          }
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

std::string float_json(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(v);
}

std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Kind::String: return k.str();
    case Kind::Int: return std::to_string(k.as_int());
    case Kind::Float: return float_json(k.as_float());
    case Kind::Bool: return k.as_bool() ? "true" : "false";
    case Kind::None: return "null";
    default: fail("keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

void dump(const Value& v, const JsonStyle& st, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *st.indent;
  };
  switch (v.kind()) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.as_int()); return;
    case Kind::Float: out += float_json(v.as_float()); return;
    case Kind::String: dump_string(v.str(), st.ensure_ascii, out); return;
    case Kind::List: {
      const List& l = v.list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) out += st.item_separator;
        if (st.indent) newline(level + 1);
        dump(l[i], st, level + 1, out);
      }
      if (st.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      if (v.has_call()) break;
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, item] : v.dict().items) items.emplace_back(key_string(k), &item);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += st.item_separator;
        if (st.indent) newline(level + 1);
        dump_string(items[i].first, st.ensure_ascii, out);
        out += st.key_separator;
        dump(*items[i].second, st, level + 1, out);
      }
      if (st.indent) newline(level);
      out.push_back('}');
      return;
    }
    default: break;
  }
  fail("Object of type {} is not JSON serializable", v.type_name());
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(v, style, 0, out);
  return out;
}

}  // namespace kapitsa::text::jinja
