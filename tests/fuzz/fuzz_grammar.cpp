// libFuzzer target: output constraints from the request — a GBNF grammar (first byte even) or a JSON
// schema (first byte odd) compiled to a grammar — then a matcher walking fixed sample outputs byte by
// byte and building the token mask over a small vocabulary. A refused grammar must say why.
#include "base/json.h"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"
#include "text/grammar/vocabulary.h"

#include <cstdlib>
#include <string_view>

namespace {

const kapitsa::text::TokenVocabulary& vocabulary() {
  static const kapitsa::text::TokenVocabulary v(
      {"{", "}", "\"", ":", ",", "[", "]", " ", "a", "b", "1", "-", ".", "e", "true", "false", "null", "\\",
       "\\u00", "name", "\"x\"", "\n", "ab", "\xc3", "\xa9", "<|end|>"},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view source(reinterpret_cast<const char*>(data + 1), size - 1);
  kapitsa::Expected<std::shared_ptr<const kapitsa::text::Grammar>> grammar = kapitsa::Error{};
  if (data[0] % 2 == 0) {
    grammar = kapitsa::text::parse_gbnf(source);
  } else {
    auto schema = kapitsa::Json::parse(source, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    grammar = kapitsa::text::grammar_from_json_schema(schema);
  }
  if (!grammar.ok()) {
    if (grammar.error().message.empty()) std::abort();
    return 0;
  }
  std::vector<uint8_t> allowed;
  const int32_t end_id = 25;
  for (std::string_view sample : {"{\"name\": \"x\", \"a\": [1, -2.5e3, true, null]}", "ab ab\n", "\"\\u00e9\xc3\xa9\""}) {
    kapitsa::text::GrammarMatcher matcher(*grammar);
    for (char c : sample) {
      matcher.fill_mask(vocabulary(), allowed, {&end_id, 1});
      if (!matcher.accept_bytes(std::string_view(&c, 1))) break;
    }
    (void)matcher.can_end();
  }
  return 0;
}
