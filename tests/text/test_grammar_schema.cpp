// JSON-schema and tool-call grammars by random walks: tokens drawn uniformly among those the mask
// allows (the demo tokenizer), until the grammar completes; every finished output must parse and
// validate (tests/common/json_schema_check.h), tool calls must parse with the model's own parser.
// Also: conversion errors name the fault, and tolerated keywords do not fail.
#include "common/json_schema_check.h"
#include "test_util.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/matcher.h"
#include "text/grammar/tool_call_grammar.h"
#include "text/grammar/vocabulary.h"
#include "text/parse/output_parser.h"
#include "text/parse/tool_calls.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

namespace kapitsa::text {
namespace {

const TokenVocabulary& demo_vocab() {
  static const TokenVocabulary* v = [] {
    auto t = Tokenizer::load(testing::test_data_path("../models/demo/target"));
    if (!t.ok()) std::abort();
    return new TokenVocabulary(*t);
  }();
  return *v;
}

// A random output of the grammar (tokens uniform among the allowed, end taken with probability 1/4
// when allowed). Empty optional when the walk ran out of budget.
std::optional<std::string> walk(const std::shared_ptr<const Grammar>& g, std::mt19937_64& rng, int budget = 800) {
  const TokenVocabulary& vocab = demo_vocab();
  GrammarMatcher m(g);
  std::vector<uint8_t> mask;
  std::string out;
  int32_t end_id = 0;  // a special token plays end-of-generation
  while (!vocab.is_special(end_id)) ++end_id;
  const std::vector<int32_t> end{end_id};
  for (int i = 0; i < budget; ++i) {
    m.fill_mask(vocab, mask, end);
    if (mask[static_cast<size_t>(end_id)] && (m.is_complete() || rng() % 4 == 0)) return out;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (mask[static_cast<size_t>(id)] && id != end_id) allowed.push_back(id);
    if (allowed.empty()) {
      ADD_FAILURE() << "dead end after: " << out;
      return std::nullopt;
    }
    // Half the time prefer tokens holding a closing character, so walks finish in a reasonable budget.
    if (rng() % 2 == 0) {
      std::vector<int32_t> closing;
      for (int32_t id : allowed)
        if (vocab.token_bytes(id).find_first_of("\"}]>") != std::string_view::npos) closing.push_back(id);
      if (!closing.empty()) allowed.swap(closing);
    }
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(id, vocab));
    out += vocab.token_bytes(id);
  }
  return std::nullopt;
}

const char* kSchemas[] = {
    // nested objects, required/optional
    R"({"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer"},
       "name":{"type":"string","maxLength":8},"admin":{"type":"boolean"}},"required":["id"]},
       "note":{"type":["string","null"],"maxLength":6}},"required":["user"],"additionalProperties":false})",
    // arrays, enums, prefixItems, numbers
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"enum":["red","green",3,null]},"minItems":1,"maxItems":3},
       "point":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false},
       "scores":{"type":"array","items":{"type":"number","minimum":0}}},"required":["tags","point"]})",
    // strings with escapes and lengths, const, anyOf, $ref recursion
    R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","$defs":{"node":{"type":"object",
       "properties":{"label":{"type":"string","minLength":1,"maxLength":5},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
       "required":["label"]}},"type":"object","properties":{"kind":{"const":"tree"},"root":{"$ref":"#/$defs/node"},
       "id":{"anyOf":[{"type":"integer","maximum":9007199254740991,"exclusiveMinimum":0},{"type":"string","pattern":"^x","maxLength":4}]}},
       "required":["kind","root","id"]})",
    // additionalProperties schema, free object, any value
    R"({"type":"object","properties":{"meta":{"type":"object"},"any":{},"n":{"type":"number"}},
       "additionalProperties":{"type":"integer"},"required":["n"]})",
    // top level array of enums
    R"({"type":"array","items":{"type":"string","enum":["a\"b","c\\d","é"]},"minItems":2,"maxItems":4})",
};

TEST(GrammarSchema, RandomWalksParseAndValidate) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    auto g = grammar_from_json_schema(schema);
    ASSERT_TRUE(g.ok()) << g.error().message;
    int finished = 0;
    for (int i = 0; i < 20; ++i) {
      auto out = walk(*g, rng);
      if (!out) continue;
      ++finished;
      const Json doc = Json::parse(*out, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << *out << "\nschema: " << text;
      const std::string why = testing::schema_violation(doc, schema);
      EXPECT_TRUE(why.empty()) << why << "\noutput: " << *out << "\nschema: " << text;
    }
    EXPECT_GE(finished, 15) << text;
  }
}

TEST(GrammarSchema, ReasoningPrefixThenJson) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  GrammarStart start;
  start.in_reasoning = true;
  auto g = grammar_for_json_object(start);
  ASSERT_TRUE(g.ok()) << g.error().message;
  GrammarMatcher m(*g);
  EXPECT_TRUE(m.accept_bytes("I think </thin no </think>\n"));
  EXPECT_TRUE(m.accept_bytes("{\"a\": [1, {\"b\": null}]}"));
  EXPECT_TRUE(m.is_complete());
  for (int i = 0; i < 5; ++i) {
    auto out = walk(*g, rng, 1500);
    if (!out) continue;
    const size_t close = out->find("</think>");
    ASSERT_NE(close, std::string::npos) << *out;
    const Json doc = Json::parse(out->substr(close + 8), nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << *out;
    EXPECT_TRUE(doc.is_object()) << *out;
  }
}

TEST(GrammarSchema, ErrorsAndToleratedKeywords) {
  EXPECT_FALSE(grammar_from_json_schema(Json::parse(R"({"$ref":"#/$defs/missing"})")).ok());
  EXPECT_FALSE(grammar_from_json_schema(Json::parse(R"({"type":"strin"})")).ok());
  EXPECT_FALSE(grammar_from_json_schema(Json(false)).ok());
  auto e = grammar_from_json_schema(Json::parse(R"({"properties":{"a":{"type":7}}})"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("schema-a"), std::string::npos) << e.error().message;
  for (const char* ok : {R"(true)", R"({})", R"({"type":"string","format":"date-time","pattern":"^a"})",
                         R"({"type":"integer","minimum":1,"maximum":9007199254740991,"multipleOf":2})",
                         R"({"allOf":[{"type":"object","properties":{"a":{"type":"string"}}}],"description":"d","examples":[1]})",
                         R"({"definitions":{"x":{"type":"number"}},"type":"array","items":{"$ref":"#/definitions/x"},"uniqueItems":true})"})
    EXPECT_TRUE(grammar_from_json_schema(Json::parse(ok)).ok()) << ok;
}

TEST(GrammarSchema, OrderedJsonKeepsTheSchemasPropertyOrder) {
  const char* text = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]})";
  auto ordered = grammar_from_json_schema(OrderedJson::parse(text));
  auto sorted = grammar_from_json_schema(Json::parse(text));
  ASSERT_TRUE(ordered.ok() && sorted.ok());
  GrammarMatcher a(*ordered), b(*sorted);
  EXPECT_TRUE(a.accept_bytes(R"({"zeta": 1, "alpha": 2})") && a.is_complete());
  EXPECT_FALSE(GrammarMatcher(*ordered).accept_bytes(R"({"alpha")"));
  EXPECT_TRUE(b.accept_bytes(R"({"alpha": 2, "zeta": 1})") && b.is_complete());
  const OrderedJson tools = OrderedJson::parse(R"([{"name":"w","input_schema":{"type":"object","properties":{
      "path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}}])");
  auto call = grammar_for_tool_call(ToolFormat::qwen_xml, tools);
  ASSERT_TRUE(call.ok()) << call.error().message;
  // $refs of a JSON-typed qwen_xml parameter resolve in the tool's schema; an undeclared required
  // parameter is taken as text.
  const OrderedJson refs = OrderedJson::parse(R"([{"name":"r","input_schema":{"type":"object","$defs":{"p":{"type":"object",
      "properties":{"x":{"type":"integer"}},"required":["x"]}},"properties":{"pts":{"type":"array","items":{"$ref":"#/$defs/p"}}},
      "required":["pts","extra"]}}])");
  auto ref_call = grammar_for_tool_call(ToolFormat::qwen_xml, refs);
  ASSERT_TRUE(ref_call.ok()) << ref_call.error().message;
  GrammarMatcher r(*ref_call);
  EXPECT_TRUE(r.accept_bytes("<tool_call>\n<function=r>\n<parameter=pts>\n[{\"x\": 1}]\n</parameter>\n<parameter=extra>\nhi\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(r.is_complete());
  GrammarMatcher c(*call);
  EXPECT_TRUE(c.accept_bytes("<tool_call>\n<function=w>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nx < y\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(c.is_complete());
}

const char* kTools = R"([
  {"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{
     "path":{"type":"string","maxLength":20},"limit":{"type":"integer"},"mode":{"type":"string","enum":["text","bytes"]}},"required":["path"]}}},
  {"name":"edit","input_schema":{"type":"object","properties":{"changes":{"type":"array","maxItems":2,"items":{"type":"object",
     "properties":{"line":{"type":"integer"},"text":{"type":"string","maxLength":5}},"required":["line","text"]}},
     "dry":{"type":"boolean"},"meta":{"type":"object"}},"required":["changes"]}}])";

TEST(GrammarToolCall, RandomCallsParseAndValidate) {
  const char* fixed = std::getenv("KAPITSA_GRAMMAR_SEED");  // to replay a failure
  const uint64_t seed = fixed ? std::strtoull(fixed, nullptr, 10) : testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Json tools = Json::parse(kTools);
  for (ToolFormat format : {ToolFormat::qwen_xml, ToolFormat::hermes_json, ToolFormat::nemotron}) {
    auto g = grammar_for_tool_call(format, tools);
    ASSERT_TRUE(g.ok()) << g.error().message;
    int finished = 0;
    for (int i = 0; i < 20; ++i) {
      auto out = walk(*g, rng, 1500);
      if (!out) continue;
      // The closing tag appears once, at the end (never inside a JSON string).
      const std::string tag = format == ToolFormat::nemotron ? "</TOOLCALL>" : "</tool_call>";
      EXPECT_EQ(out->find(tag) + tag.size(), out->size()) << *out;
      ++finished;
      ParserOptions options;
      options.tools = format;
      options.tool_schemas = tools;
      OutputParser parser(options);
      ParseEvents events = parser.feed(*out);
      for (ParseEvent& e : parser.finish()) events.push_back(std::move(e));
      std::vector<ToolCall> calls;
      for (const ParseEvent& e : events) {
        EXPECT_NE(e.kind, ParseEvent::Kind::warning) << e.text << "\n" << *out;
        if (e.kind == ParseEvent::Kind::content) EXPECT_TRUE(e.text.find_first_not_of(" \n") == std::string::npos) << *out;
        if (e.kind == ParseEvent::Kind::tool_call) calls.push_back(e.call);
      }
      ASSERT_EQ(calls.size(), 1u) << *out;
      const Json args = Json::parse(calls[0].arguments);
      const Json& schema = calls[0].name == "read_file" ? tools[0]["function"]["parameters"] : tools[1]["input_schema"];
      EXPECT_TRUE(calls[0].name == "read_file" || calls[0].name == "edit") << calls[0].name;
      const std::string why = testing::schema_violation(args, schema);
      EXPECT_TRUE(why.empty()) << why << "\n" << *out;
    }
    EXPECT_GE(finished, 15);
  }
}

}  // namespace
}  // namespace kapitsa::text
