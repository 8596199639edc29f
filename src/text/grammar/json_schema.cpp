// JSON Schema → GBNF → Grammar (see json_schema.h for what is supported and what is ignored).
#include "text/grammar/json_schema.h"

#include "base/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace kapitsa::text {
namespace {

using OJson = nlohmann::ordered_json;

// Shared rules, written once per grammar. `ws` is bounded: one space, or a newline and an indent of
// at most 16 spaces. \u escapes exclude surrogates (a lone one is invalid JSON to strict parsers);
// number digits are bounded so a model cannot stall and the value stays a finite double.
constexpr const char* kPrimitives = R"(ws ::= ( " " | "\n" " "{0,16} )?
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex-escape )
hex-escape ::= [0-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex
hex ::= [0-9a-fA-F]
integer ::= "-"? natural
natural ::= "0" | [1-9] [0-9]{0,15}
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
)";

// JSON text of a value as the grammar writes it (compact, UTF-8 kept).
std::string dump(const OJson& v) { return v.dump(-1, ' ', false, OJson::error_handler_t::replace); }

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  if (out.empty()) out = "x";
  return out;
}

bool has_any(const OJson& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (s.contains(k)) return true;
  return false;
}

}  // namespace

struct JsonGrammarWriter::Impl {
  std::string rules;
  std::set<std::string> names{"ws", "value", "object", "array", "string", "char", "hex-escape", "hex",
                              "integer", "natural", "number", "boolean", "null", "root"};
  const OJson* root = nullptr;
  std::map<std::string, std::string> refs;  // "$ref" string → rule name
  std::vector<std::string> forbidden;       // literals strings may not hold (forbid_in_strings)

  std::string fresh(const std::string& base) {
    std::string n = sanitize(base);
    if (names.insert(n).second) return n;
    for (int i = 2;; ++i)
      if (names.insert(fmt::format("{}-{}", n, i)).second) return fmt::format("{}-{}", n, i);
  }
  std::string define(const std::string& base, const std::string& body) {
    const std::string n = fresh(base);
    rules += n + " ::= " + body + "\n";
    return n;
  }

  Expected<const OJson*> resolve(const std::string& ref) {
    if (ref.rfind("#", 0) != 0) return error("json schema: only local $ref (\"#/...\") are supported, got '{}'", ref);
    if (ref == "#") return root;
    try {
      const OJson::json_pointer ptr(ref.substr(1));
      if (!root->contains(ptr)) return error("json schema: $ref '{}' names nothing in the schema", ref);
      return &root->at(ptr);
    } catch (const std::exception&) {
      return error("json schema: $ref '{}' is not a valid JSON pointer", ref);
    }
  }

  // An expression (GBNF) for a value valid against `s`; `name` seeds rule names.
  Expected<std::string> convert(const OJson& s, const std::string& name, int depth) {
    if (depth > 64) return error("json schema: nested more than 64 levels at '{}'", name);
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return error("json schema: 'false' at '{}' matches nothing", name);
    }
    if (!s.is_object()) return error("json schema: expected an object or a boolean at '{}'", name);
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return error("json schema: $ref at '{}' must be a string", name);
      const std::string ref = s["$ref"].get<std::string>();
      auto it = refs.find(ref);
      if (it != refs.end()) return it->second;
      KAPITSA_TRY(const OJson* target, resolve(ref));
      const std::string rule = fresh("ref-" + ref.substr(ref.rfind('/') + 1));
      refs.emplace(ref, rule);  // before converting: recursive schemas refer back to it
      KAPITSA_TRY(std::string body, convert(*target, rule, depth + 1));
      rules += rule + " ::= " + body + "\n";
      return rule;
    }
    if (s.contains("const")) return std::string(gbnf_literal(dump(s["const"])));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return error("json schema: 'enum' at '{}' must be a non-empty array", name);
      std::string body;
      for (const OJson& v : s["enum"]) body += (body.empty() ? "" : " | ") + gbnf_literal(dump(v));
      return "(" + body + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) return error("json schema: '{}' at '{}' must be a non-empty array", key, name);
      std::string body;
      int i = 0;
      for (const OJson& alt : s[key]) {
        // Keywords beside anyOf (e.g. a shared "type") apply to each alternative.
        OJson merged = alt;
        if (alt.is_object())
          for (const auto& [k, v] : s.items())
            if (k != key && !merged.contains(k) && k != "description" && k != "title") merged[k] = v;
        KAPITSA_TRY(std::string e, convert(merged, fmt::format("{}-{}", name, i++), depth + 1));
        body += (body.empty() ? "" : " | ") + e;
      }
      return define(name, body);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) return error("json schema: 'allOf' at '{}' must be a non-empty array", name);
      // Merged shallowly: properties and required are united, other keywords: the first one wins.
      OJson merged = OJson::object();
      for (const auto& [k, v] : s.items())
        if (k != "allOf") merged[k] = v;
      for (const OJson& part0 : s["allOf"]) {
        const OJson* part = &part0;
        if (part0.is_object() && part0.contains("$ref") && part0["$ref"].is_string()) {
          KAPITSA_TRY(const OJson* target, resolve(part0["$ref"].get<std::string>()));
          part = target;
        }
        if (!part->is_object()) continue;
        for (const auto& [k, v] : part->items()) {
          if (k == "properties" && v.is_object()) {
            if (!merged.contains("properties")) merged["properties"] = OJson::object();
            for (const auto& [pk, pv] : v.items()) merged["properties"][pk] = pv;
          } else if (k == "required" && v.is_array()) {
            if (!merged.contains("required")) merged["required"] = OJson::array();
            for (const OJson& r : v) merged["required"].push_back(r);
          } else if (!merged.contains(k)) {
            merged[k] = v;
          }
        }
      }
      return convert(merged, name, depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const OJson& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const OJson& e : t)
          if (e.is_string()) types.push_back(e.get<std::string>());
      if (types.empty()) return error("json schema: 'type' at '{}' must be a string or an array of strings", name);
    } else if (has_any(s, {"properties", "additionalProperties", "required"})) {
      types.push_back("object");
    } else if (has_any(s, {"items", "prefixItems", "minItems", "maxItems"})) {
      types.push_back("array");
    } else if (has_any(s, {"minLength", "maxLength"})) {
      types.push_back("string");
    } else {
      return std::string("value");  // {} or only annotations: any JSON value
    }
    if (s.value("nullable", false) && std::find(types.begin(), types.end(), "null") == types.end()) types.push_back("null");
    std::string body;
    for (const std::string& type : types) {
      KAPITSA_TRY(std::string e, convert_type(s, type, types.size() > 1 ? name + "-" + type : name, depth));
      body += (body.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? body : "(" + body + ")";
  }

  Expected<std::string> convert_type(const OJson& s, const std::string& type, const std::string& name, int depth) {
    if (type == "null") return std::string("null");
    if (type == "boolean") return std::string("boolean");
    if (type == "integer" || type == "number") {
      // Only the sign is constrained (minimum >= 0); other bounds are not enforced.
      bool non_negative = false;
      for (const char* k : {"minimum", "exclusiveMinimum"})
        if (s.contains(k) && s[k].is_number() && s[k].get<double>() >= 0) non_negative = true;
      if (type == "integer") return std::string(non_negative ? "natural" : "integer");
      return std::string(non_negative ? "(natural (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)" : "number");
    }
    if (type == "string") {
      const int64_t lo = s.contains("minLength") && s["minLength"].is_number_integer() ? s["minLength"].get<int64_t>() : 0;
      int64_t hi = s.contains("maxLength") && s["maxLength"].is_number_integer() ? s["maxLength"].get<int64_t>() : -1;
      if (lo < 0 || lo > 10000) return error("json schema: minLength {} at '{}' is out of range (0..10000)", lo, name);
      if (hi > 10000) hi = -1;  // too long to be worth counting: not enforced
      if (hi >= 0 && hi < lo) return error("json schema: maxLength < minLength at '{}'", name);
      if (lo == 0 && hi < 0) return std::string("string");
      return define(name, hi < 0 ? fmt::format("\"\\\"\" char{{{},}} \"\\\"\"", lo) : fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\"", lo, hi));
    }
    if (type == "array") return convert_array(s, name, depth);
    if (type == "object") return convert_object(s, name, depth);
    return error("json schema: unknown type '{}' at '{}'", type, name);
  }

  Expected<std::string> convert_array(const OJson& s, const std::string& name, int depth) {
    std::vector<std::string> prefix;
    const OJson* prefix_items = s.contains("prefixItems") && s["prefixItems"].is_array() ? &s["prefixItems"]
                               : s.contains("items") && s["items"].is_array()          ? &s["items"]
                                                                                       : nullptr;
    int64_t lo = s.contains("minItems") && s["minItems"].is_number_integer() ? s["minItems"].get<int64_t>() : 0;
    int64_t hi = s.contains("maxItems") && s["maxItems"].is_number_integer() ? s["maxItems"].get<int64_t>() : -1;
    if (lo < 0 || lo > 1000 || (hi >= 0 && hi < lo)) return error("json schema: minItems/maxItems at '{}' are out of range", name);
    if (hi > 1000) hi = -1;
    if (prefix_items) {
      int i = 0;
      for (const OJson& p : *prefix_items) {
        if (hi >= 0 && static_cast<int64_t>(prefix.size()) >= hi) break;
        KAPITSA_TRY(std::string e, convert(p, fmt::format("{}-{}", name, i++), depth + 1));
        prefix.push_back(e);
      }
    }
    // Items after the prefix: `items` (a schema), or none when only prefixItems is given.
    std::string rest;
    if (s.contains("items") && !s["items"].is_array()) {
      if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
        KAPITSA_TRY(std::string e, convert(s["items"], name + "-item", depth + 1));
        rest = e;
      }
    } else if (!prefix_items) {
      rest = "value";
    } else if (s.contains("additionalItems") && !(s["additionalItems"].is_boolean() && !s["additionalItems"].get<bool>())) {
      KAPITSA_TRY(std::string e, convert(s["additionalItems"], name + "-item", depth + 1));
      rest = e;
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (rest.empty() && lo > k) return error("json schema: minItems {} at '{}' exceeds the {} items allowed", lo, name, k);
    std::string body = "\"[\" ws ";
    for (int64_t i = 0; i < k; ++i) body += (i > 0 ? "\",\" ws " : "") + prefix[static_cast<size_t>(i)] + " ws ";
    if (!rest.empty() && (hi < 0 || hi > k)) {
      const int64_t more_lo = std::max<int64_t>(lo - k, 0);
      const int64_t more_hi = hi < 0 ? -1 : hi - k;
      const std::string item = (k > 0 ? "\",\" ws " : "") + rest + " ws";
      if (k > 0) {
        body += fmt::format("({}){{{},{}}} ", item, more_lo, more_hi < 0 ? std::string() : std::to_string(more_hi));
      } else {
        // first item without a comma, the others with one
        const std::string tail = fmt::format("(\",\" ws {} ws){{{},{}}}", rest, std::max<int64_t>(more_lo - 1, 0),
                                             more_hi < 0 ? std::string() : std::to_string(more_hi - 1));
        if (more_lo > 0) body += fmt::format("{} ws {} ", rest, tail);
        else body += fmt::format("({} ws {})? ", rest, tail);
      }
    }
    body += "\"]\"";
    return define(name, body);
  }

  Expected<std::string> convert_object(const OJson& s, const std::string& name, int depth) {
    const OJson props = s.contains("properties") && s["properties"].is_object() ? s["properties"] : OJson::object();
    std::set<std::string> required;
    if (s.contains("required") && s["required"].is_array())
      for (const OJson& r : s["required"])
        if (r.is_string()) required.insert(r.get<std::string>());
    // Extra keys: additionalProperties true / a schema; absent: only when no properties are declared.
    std::string extra;
    const bool has_extra_key = s.contains("additionalProperties");
    const OJson extra_schema = has_extra_key ? s["additionalProperties"] : OJson(props.empty());
    if (!(extra_schema.is_boolean() && !extra_schema.get<bool>())) {
      KAPITSA_TRY(std::string e, convert(extra_schema, name + "-extra-value", depth + 1));
      extra = define(name + "-extra", "string ws \":\" ws " + e + " ws");
    }
    // Required keys not listed in properties still must appear: as (any) values.
    std::vector<std::pair<std::string, OJson>> members;
    for (const auto& [k, v] : props.items()) members.emplace_back(k, v);
    for (const std::string& r : required)
      if (!props.contains(r)) members.emplace_back(r, extra_schema.is_object() ? extra_schema : OJson(true));
    // first-i: members from i on, none written yet; rest-i: from i on, after at least one (commas).
    const size_t n = members.size();
    std::vector<std::string> kv(n);
    for (size_t i = 0; i < n; ++i) {
      KAPITSA_TRY(std::string e, convert(members[i].second, name + "-" + members[i].first, depth + 1));
      kv[i] = define(name + "-" + members[i].first + "-kv", gbnf_literal(dump(OJson(members[i].first))) + " ws \":\" ws " + e + " ws");
    }
    std::vector<std::string> first(n + 1), rest(n + 1);
    rest[n] = extra.empty() ? "\"\"" : define(name + "-rest", "(\",\" ws " + extra + ")*");
    first[n] = extra.empty() ? "\"\"" : define(name + "-first", "(" + extra + " " + rest[n] + ")?");
    for (size_t i = n; i-- > 0;) {
      const bool req = required.contains(members[i].first);
      rest[i] = define(name + "-rest", req ? "\",\" ws " + kv[i] + " " + rest[i + 1] : "(\",\" ws " + kv[i] + ")? " + rest[i + 1]);
      first[i] = define(name + "-first", req ? kv[i] + " " + rest[i + 1] : kv[i] + " " + rest[i + 1] + " | " + first[i + 1]);
    }
    return define(name, "\"{\" ws " + first[0] + " \"}\"");
  }
};

JsonGrammarWriter::JsonGrammarWriter() : impl_(std::make_unique<Impl>()) {}
JsonGrammarWriter::~JsonGrammarWriter() = default;

namespace {
// Json keeps keys sorted; its ordered copy keeps that order (the schema's own order is gone already).
OJson ordered(const Json& j) { return OJson::parse(j.dump()); }
}  // namespace

Expected<std::string> JsonGrammarWriter::add_schema(const OJson& schema, const std::string& name, const OJson* root) {
  impl_->root = root != nullptr ? root : &schema;
  impl_->refs.clear();  // $refs are relative to each schema
  KAPITSA_TRY(std::string e, impl_->convert(schema, name, 0));
  return impl_->define(name, e);
}

Expected<std::string> JsonGrammarWriter::add_schema(const Json& schema, const std::string& name) {
  const OJson o = ordered(schema);
  return add_schema(o, name);
}

std::string JsonGrammarWriter::rules() const {
  if (impl_->forbidden.empty()) return impl_->rules + kPrimitives;
  std::string primitives = kPrimitives;
  auto replace_rule = [&](const std::string& head, const std::string& body) {
    const size_t at = primitives.find("\n" + head + " ::= ");
    KAPITSA_CHECK(at != std::string::npos, "no rule {}", head);
    const size_t end = primitives.find('\n', at + 1);
    primitives.replace(at + 1, end - at - 1, body);
  };
  const std::string escape = R"("\\" ( ["\\/bfnrt] | "u" hex-escape ))";
  replace_rule("string", "string ::= \"\\\"\" string-body");
  replace_rule("char", R"(char ::= [^"\\<\x00-\x1F] | )" + escape);
  primitives += gbnf_text_until("string-body", "\"", impl_->forbidden, R"(\\\x00-\x1F)", escape);
  return impl_->rules + primitives;
}

void JsonGrammarWriter::forbid_in_strings(std::vector<std::string> literals) {
  impl_->forbidden = std::move(literals);
  impl_->names.insert("string-body");
}

Expected<std::string> json_schema_to_gbnf(const OJson& schema, const GrammarStart& start) {
  JsonGrammarWriter w;
  KAPITSA_TRY(std::string rule, w.add_schema(schema, "schema"));
  std::string out = "root ::= reasoning " + rule + "\n";
  gbnf_reasoning_prefix("reasoning", start, out);
  return out + w.rules();
}

Expected<std::string> json_schema_to_gbnf(const Json& schema, const GrammarStart& start) {
  return json_schema_to_gbnf(ordered(schema), start);
}

Expected<std::shared_ptr<const Grammar>> grammar_from_json_schema(const OJson& schema, const GrammarStart& start) {
  KAPITSA_TRY(std::string gbnf, json_schema_to_gbnf(schema, start));
  auto g = parse_gbnf(gbnf);
  if (!g.ok()) return error("json schema: internal grammar error: {}", g.error().message);
  return g;
}

Expected<std::shared_ptr<const Grammar>> grammar_from_json_schema(const Json& schema, const GrammarStart& start) {
  return grammar_from_json_schema(ordered(schema), start);
}

Expected<std::shared_ptr<const Grammar>> grammar_for_json_object(const GrammarStart& start) {
  return grammar_from_json_schema(OJson{{"type", "object"}}, start);
}

}  // namespace kapitsa::text
