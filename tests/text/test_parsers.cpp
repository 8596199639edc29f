// Output parsers: each format's events for a known text, and the same events whatever the chunking
// (cut at every byte position, byte by byte).
#include "parser_harness.h"

#include "base/json.h"
#include "text/parse/tool_calls.h"

namespace kapitsa::testing {
namespace {

using text::ParseEvent;
using text::ParseEvents;
using text::ParserOptions;
using text::ToolFormat;
using Kind = ParseEvent::Kind;

ParseEvent content(std::string t) { return {Kind::content, std::move(t), {}}; }
ParseEvent reasoning(std::string t) { return {Kind::reasoning, std::move(t), {}}; }
ParseEvent call(std::string name, std::string args) { return {Kind::tool_call, "", {std::move(name), std::move(args)}}; }

// Strips warning texts so expectations can say "a warning here" without quoting it.
ParseEvents blank_warnings(ParseEvents events) {
  for (ParseEvent& e : events)
    if (e.kind == Kind::warning) e.text.clear();
  return events;
}
ParseEvent warning() { return {Kind::warning, "", {}}; }

// Whole-text events must equal `expected`, and every way of cutting the text must give the same.
void check_all_cuts(const ParserOptions& options, const std::string& text, const ParseEvents& expected,
                    bool markup_free = false) {
  const ParseEvents whole = run_parser(options, text, {}, markup_free);
  EXPECT_EQ(blank_warnings(whole), expected) << "got:\n" << describe(whole) << "want:\n" << describe(expected);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const ParseEvents split = run_parser(options, text, {cut}, markup_free);
    ASSERT_EQ(split, whole) << "cut at " << cut << ":\n" << describe(split);
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  EXPECT_EQ(run_parser(options, text, every_byte, markup_free), whole) << "byte by byte";
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {
     "path": {"type": "string"}, "limit": {"type": "integer"}, "verbose": {"type": "boolean"},
     "ratio": {"type": "number"}, "opts": {"type": "object"}, "tags": {"type": ["array", "null"]},
     "note": {"type": "string"}}}}},
  {"name": "anthropic_style", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
])");

TEST(Parsers, HermesWithReasoning) {
  ParserOptions o;
  o.reasoning = true;
  o.tools = ToolFormat::hermes_json;
  const std::string text =
      "<think>\nLet me think about é and 😀.\n</think>\n\nI'll call it.\n\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>";
  check_all_cuts(o, text,
                 {reasoning("Let me think about é and 😀."), content("I'll call it."),
                  call("get_weather", R"({"city":"Paris","unit":"c"})"), call("b", R"({"x":1})")},
                 true);
}

TEST(Parsers, QwenXmlStartingInsideReasoning) {
  ParserOptions o;
  o.reasoning = true;
  o.starts_in_reasoning = true;
  o.tools = ToolFormat::qwen_xml;
  o.tool_schemas = kTools;
  const std::string text =
      "The user wants a file.\n</think>\n\n<tool_call>\n<function=read_file>\n"
      "<parameter=path>\n/tmp/a b.txt\n</parameter>\n<parameter=limit>\n20\n</parameter>\n"
      "<parameter=verbose>\nTrue\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=opts>\n{\"z\": 1, \"a\": [1, 2]}\n</parameter>\n<parameter=tags>\nnull\n</parameter>\n"
      "<parameter=note>\nif a < b:\n    print('<x>')\n\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=anthropic_style>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>";
  check_all_cuts(o, text,
                 {reasoning("The user wants a file."),
                  call("read_file", R"({"path":"/tmp/a b.txt","limit":20,"verbose":true,"ratio":0.5,)"
                                    R"("opts":{"z":1,"a":[1,2]},"tags":null,"note":"if a < b:\n    print('<x>')\n"})"),
                  call("anthropic_style", R"({"n":7})")});
}

TEST(Parsers, QwenXmlUnknownToolKeepsStrings) {
  ParserOptions o;
  o.tools = ToolFormat::qwen_xml;
  const std::string text =
      "Checking.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n<parameter=n>\n5\n</parameter>\n"
      "</function>\n</tool_call>";
  // A missing </parameter> ends the value at the next <parameter=.
  check_all_cuts(o, text, {content("Checking."), call("run", R"({"cmd":"ls -la","n":"5"})")});
}

TEST(Parsers, QwenXmlBareFunctionBlock) {
  ParserOptions o;
  o.tools = ToolFormat::qwen_xml;
  const std::string text = "<function=f>\n<parameter=a>\nx\n</parameter>\n</function>\n</tool_call>\nDone.";
  check_all_cuts(o, text, {call("f", R"({"a":"x"})"), content("Done.")}, true);
}

TEST(Parsers, Nemotron) {
  ParserOptions o;
  o.reasoning = true;
  o.tools = ToolFormat::nemotron;
  const std::string text =
      "<think>plan</think>Calling two tools.<TOOLCALL>[{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": 2}}, "
      "{\"name\": \"g\", \"arguments\": {}}]</TOOLCALL>";
  check_all_cuts(o, text,
                 {reasoning("plan"), content("Calling two tools."), call("f", R"({"b":1,"a":2})"), call("g", "{}")},
                 true);
}

TEST(Parsers, MalformedCallComesBackAsText) {
  ParserOptions o;
  o.tools = ToolFormat::hermes_json;
  const std::string bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {bad json}\n</tool_call>";
  check_all_cuts(o, "Sure." + bad + " done", {content("Sure."), warning(), content(bad + " done")});
  ParserOptions x;
  x.tools = ToolFormat::qwen_xml;
  const std::string no_function = "<tool_call>\nnothing here\n</tool_call>";
  check_all_cuts(x, no_function, {warning(), content(no_function)});
  ParserOptions n;
  n.tools = ToolFormat::nemotron;
  check_all_cuts(n, "<TOOLCALL>[{\"arguments\": {}}]</TOOLCALL>",
                 {warning(), content("<TOOLCALL>[{\"arguments\": {}}]</TOOLCALL>")});
}

TEST(Parsers, UnclosedCallAtTheEnd) {
  ParserOptions o;
  o.tools = ToolFormat::qwen_xml;
  check_all_cuts(o, "<tool_call>\n<function=f>\n<parameter=a>\n1", {warning(), call("f", R"({"a":"1"})")});
  check_all_cuts(o, "text <tool_call>\n<functi", {content("text"), warning(), content("<tool_call>\n<functi")});
}

TEST(Parsers, TextThatOnlyLooksLikeMarkup) {
  ParserOptions o;
  o.reasoning = true;
  o.tools = ToolFormat::qwen_xml;
  const std::string text = "a < b and <tool> or <functional> 한글 😀 <think> later is text";
  check_all_cuts(o, text, {content(text)});
}

TEST(Parsers, PassthroughKeepsEverything) {
  const std::string text = "  \n<think>x</think> <tool_call>{}</tool_call> \xF0\x9F\x98\x80 \n";
  check_all_cuts(ParserOptions{}, text, {content(text)});
}

TEST(Parsers, ReasoningWithoutEnd) {
  ParserOptions o;
  o.reasoning = true;
  o.starts_in_reasoning = true;
  check_all_cuts(o, "\nthinking...\n", {reasoning("thinking...\n")});
  ParserOptions q;
  q.reasoning = true;
  check_all_cuts(q, "  <think>\n\n</think>\n\nHello!", {content("Hello!")}, true);
}

TEST(Parsers, PromptOpensReasoning) {
  EXPECT_TRUE(text::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(text::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(text::prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(Parsers, ConvertParameterByType) {
  auto conv = [](std::string_view v, const char* schema) { return text::convert_parameter(v, Json::parse(schema)).dump(); };
  EXPECT_EQ(conv("42", R"({"type": "integer"})"), "42");
  EXPECT_EQ(conv(" 4.0e1 ", R"({"type": "number"})"), "40.0");
  EXPECT_EQ(conv("forty", R"({"type": "integer"})"), "\"forty\"");
  EXPECT_EQ(conv("FALSE", R"({"type": "boolean"})"), "false");
  EXPECT_EQ(conv("[1, \"a\"]", R"({"type": "array"})"), "[1,\"a\"]");
  EXPECT_EQ(conv("{bad", R"({"type": "object"})"), "\"{bad\"");
  EXPECT_EQ(conv("007", R"({"type": "string"})"), "\"007\"");
  EXPECT_EQ(conv("3", R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})"), "3");
  EXPECT_EQ(conv("3", "null"), "\"3\"");
}

}  // namespace
}  // namespace kapitsa::testing
