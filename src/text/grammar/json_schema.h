// JSON Schema → Grammar for structured output (response_format json_schema / json_object). Output is
// compact-ish JSON: between tokens at most one space or a newline plus up to 16 spaces of indent (a
// bound so a model cannot stall emitting whitespace). Object properties come in the order of the JSON
// object given (an OrderedJson keeps the schema's order, a Json is alphabetical); optional ones may be
// skipped. Supported: type (also lists, "null"), properties/required/additionalProperties (absent: no
// extra keys unless no properties are declared), items/prefixItems/minItems/maxItems, enum, const,
// minLength/maxLength, anyOf/oneOf, allOf (merged shallowly), $ref to #/... (recursion allowed), true/{}
// (any value), minimum >= 0 (no minus sign). Ignored (output may not satisfy them): pattern, format,
// other numeric bounds, multipleOf, uniqueItems, min/maxProperties, not, if/then/else, dependencies.
#pragma once

#include "base/json.h"
#include "base/status.h"
#include "text/grammar/grammar.h"

#include <memory>
#include <string>
#include <vector>

namespace kapitsa::text {

using OrderedJson = nlohmann::ordered_json;  // as in text/parse/tool_calls.h

// The GBNF text of the schema's grammar (useful to debug; grammar_from_json_schema parses it).
// Object properties come in the order of the given JSON: pass an OrderedJson (nlohmann::ordered_json,
// parsed from the request) to keep the schema's own order, which is the order the model was shown.
Expected<std::string> json_schema_to_gbnf(const OrderedJson& schema, const GrammarStart& start = {});
Expected<std::string> json_schema_to_gbnf(const Json& schema, const GrammarStart& start = {});
Expected<std::shared_ptr<const Grammar>> grammar_from_json_schema(const OrderedJson& schema, const GrammarStart& start = {});
Expected<std::shared_ptr<const Grammar>> grammar_from_json_schema(const Json& schema, const GrammarStart& start = {});
// Any JSON object (response_format {"type": "json_object"}).
Expected<std::shared_ptr<const Grammar>> grammar_for_json_object(const GrammarStart& start = {});

// Building block for other converters (tool calls): rules for several schemas in one grammar.
class JsonGrammarWriter {
 public:
  JsonGrammarWriter();
  ~JsonGrammarWriter();
  JsonGrammarWriter(const JsonGrammarWriter&) = delete;
  JsonGrammarWriter& operator=(const JsonGrammarWriter&) = delete;
  // Writes rules for a JSON value valid against `schema` ($refs resolve inside `root`, default
  // `schema` itself); returns the name of its rule, which starts with `name` (letters, digits, '-').
  Expected<std::string> add_schema(const OrderedJson& schema, const std::string& name, const OrderedJson* root = nullptr);
  Expected<std::string> add_schema(const Json& schema, const std::string& name);
  // Every rule written so far, shared ones (value, string, ws, …) once.
  std::string rules() const;
  // Strings may not contain these literals raw (a tool-call block's closing tag): unbounded strings
  // exclude them exactly (an escape such as "<\/" still may), length-bounded strings hold no raw '<'.
  void forbid_in_strings(std::vector<std::string> literals);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kapitsa::text
