// simdjson's DOM converted into nlohmann's ordered_json (see json_body.h).
#include "server/json_body.h"

#include <simdjson.h>

#include <cstdint>
#include <string>

namespace kapitsa::server {
namespace {

namespace dom = simdjson::dom;

// The value of an element whose type was checked: the conversion cannot throw.
template <typename T>
T scalar(dom::element e) {
  return static_cast<T>(e);
}

// Depth is bounded by simdjson's (1024), so the recursion is too.
OJson convert(dom::element e) {
  switch (e.type()) {
    case dom::element_type::ARRAY: {
      OJson out = OJson::array();
      auto& items = out.get_ref<OJson::array_t&>();
      for (dom::element item : scalar<dom::array>(e)) items.push_back(convert(item));
      return out;
    }
    case dom::element_type::OBJECT: {
      OJson out = OJson::object();
      // operator[] assigns: a repeated key keeps its first place and its last value, as nlohmann's parse.
      for (dom::key_value_pair field : scalar<dom::object>(e)) out[std::string(field.key)] = convert(field.value);
      return out;
    }
    case dom::element_type::STRING: return OJson(std::string(scalar<std::string_view>(e)));
    case dom::element_type::INT64: {
      // nlohmann types every integer without a minus sign as unsigned.
      const int64_t v = scalar<int64_t>(e);
      return v >= 0 ? OJson(static_cast<uint64_t>(v)) : OJson(v);
    }
    case dom::element_type::UINT64: return OJson(scalar<uint64_t>(e));
    case dom::element_type::DOUBLE: return OJson(scalar<double>(e));
    case dom::element_type::BOOL: return OJson(scalar<bool>(e));
    case dom::element_type::NULL_VALUE: return OJson(nullptr);
  }
  return OJson(nullptr);
}

}  // namespace

std::optional<OJson> parse_json(std::string_view text) {
  // One parser per thread: its buffers grow to the largest body seen and are reused, not reallocated
  // for every request.
  thread_local dom::parser parser;
  const simdjson::padded_string padded(text);
  dom::element root;
  if (parser.parse(padded).get(root) == simdjson::SUCCESS) return convert(root);
  OJson parsed = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

}  // namespace kapitsa::server
