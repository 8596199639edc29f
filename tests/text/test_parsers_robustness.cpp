// Random markup soup into every parser configuration: no crash or hang, and the events do not depend
// on how the text was cut into chunks.
#include "parser_harness.h"

#include <random>

namespace kapitsa::testing {
namespace {

const char* const kSoup[] = {"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
                             "<think>", "</think>", "<TOOLCALL>", "</TOOLCALL>", "<", ">", "=", "{", "}", "[", "]",
                             "\"", ":", ",", "\n", " ", "name", "arguments", "f", "x", "1", "null", "true", "é",
                             "😀", "\xF0\x9F", "\xFF", "<tool", "</", "<think", "{\"name\": \"f\", \"arguments\": {}}"};

std::string soup(std::mt19937_64& rng) {
  std::string s;
  const size_t n = rng() % 40;
  for (size_t i = 0; i < n; ++i) s += kSoup[rng() % std::size(kSoup)];
  return s;
}

std::vector<size_t> random_cuts(std::mt19937_64& rng, size_t size) {
  std::vector<size_t> cuts;
  for (size_t at = 0; size > 0;) {
    at += 1 + rng() % 7;
    if (at >= size) break;
    cuts.push_back(at);
  }
  return cuts;
}

TEST(ParsersRobustness, RandomMarkupIsCutIndependent) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"properties": {"x": {"type": "integer"}, "y": {"type": "object"}}}}}])");
  for (int trial = 0; trial < 3000; ++trial) {
    text::ParserOptions o;
    o.reasoning = rng() % 2;
    o.starts_in_reasoning = rng() % 2;
    o.tools = static_cast<text::ToolFormat>(rng() % 4);
    o.tool_schemas = tools;
    const std::string s = soup(rng);
    const text::ParseEvents whole = run_parser(o, s, {});
    const text::ParseEvents cut = run_parser(o, s, random_cuts(rng, s.size()));
    ASSERT_EQ(cut, whole) << Json(text::utf8_lossy(s)).dump() << "\nwhole:\n" << describe(whole) << "cut:\n" << describe(cut);
  }
}

TEST(ParsersRobustness, LongCallFedByteByByteStaysLinear) {
  text::ParserOptions o;
  o.tools = text::ToolFormat::qwen_xml;
  std::string s = "<tool_call>\n<function=f>\n<parameter=x>\n";
  s += std::string(200000, 'a');
  s += "\n</parameter>\n</function>\n</tool_call>";
  text::OutputParser parser(o);
  text::ParseEvents events;
  for (char c : s) append_joined(events, parser.feed(std::string_view(&c, 1)));
  append_joined(events, parser.finish());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, text::ParseEvent::Kind::tool_call);
  EXPECT_EQ(events[0].call.arguments.size(), 200000u + 8);
}

}  // namespace
}  // namespace kapitsa::testing
