// A request body's JSON, parsed by simdjson and converted into nlohmann's ordered_json (what the
// endpoints read). nlohmann's own parser copies every string byte by byte: on an agent's 100k-token
// conversation (~260 KB) it was half of the request's preparation (docs/performance.md, issue 17).
#pragma once

#include "server/conversation.h"

#include <optional>
#include <string_view>

namespace kapitsa::server {

// The JSON value of `text`, the same value nlohmann's parse gives (non-negative integers unsigned,
// duplicate keys: the last wins, key order kept; one difference: -0 is an unsigned 0, nlohmann's a
// signed one, an equal value); nullopt where the text is not JSON. What simdjson
// declines (numbers outside 64-bit integers, nesting deeper than 1024, invalid UTF-8 ...) is left to
// nlohmann's verdict, so both parsers accept exactly the same texts.
std::optional<OJson> parse_json(std::string_view text);

}  // namespace kapitsa::server
