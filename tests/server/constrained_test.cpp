// Output constraints through the endpoints: tool_choice (required / named / Anthropic any / tool) and
// response formats reach the engine as a grammar in the model's own tool-call format, which accepts a
// well-formed call of an allowed tool and rejects anything else; bad constraints answer 400 naming the
// field; the server's default grammar (--grammar-file) applies only to requests without their own.
#include "server_fixture.h"
#include "text/grammar/matcher.h"

namespace kapitsa::server::testing {
namespace {

const OJson kTools = OJson::parse(R"([
  {"type":"function","function":{"name":"read","parameters":{"type":"object",
    "properties":{"path":{"type":"string"},"limit":{"type":"integer"}},"required":["path"]}}},
  {"type":"function","function":{"name":"write","parameters":{"type":"object",
    "properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}}}])");

const OJson kNoThinking = {{"enable_thinking", false}};

OJson chat_body(OJson extra) {
  OJson body = {{"model", "kapitsa-test"},
                {"messages", {{{"role", "user"}, {"content", "read /tmp/a"}}}},
                {"chat_template_kwargs", kNoThinking}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

// Whether the grammar the engine received accepts `text` as a complete output.
bool accepts(const runtime::GenerateRequest& r, const std::string& text) {
  if (!r.grammar) return false;
  text::GrammarMatcher m(r.grammar);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.accept_bytes(text.substr(i, 1))) {
      std::fprintf(stderr, "grammar rejects byte %zu of: %s\n", i, text.c_str());
      return false;
    }
  return m.can_end();
}

std::string qwen_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& args) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : args) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

TEST_F(ServerTest, NamedToolChoiceForcesThatTool) {
  auto r = call("/v1/chat/completions",
                chat_body({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "read"}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto req = engine->last_request();
  ASSERT_TRUE(req.grammar);
  EXPECT_TRUE(accepts(req, qwen_call("read", {{"path", "/tmp/a"}})));
  EXPECT_TRUE(accepts(req, qwen_call("read", {{"path", "/tmp/a"}, {"limit", "20"}})));
  EXPECT_FALSE(accepts(req, qwen_call("read", {{"path", "/tmp/a"}, {"limit", "twenty"}})));  // integer expected
  EXPECT_FALSE(accepts(req, qwen_call("read", {{"limit", "20"}})));                          // path is required
  EXPECT_FALSE(accepts(req, qwen_call("write", {{"path", "/tmp/a"}, {"content", "x"}})));     // not the named tool
  EXPECT_FALSE(accepts(req, "I will read it."));
  // Thinking is off (the prompt closed an empty <think>): no reasoning block may come first.
  EXPECT_FALSE(accepts(req, "<think>\nhm\n</think>\n\n" + qwen_call("read", {{"path", "/tmp/a"}})));

  // Thinking on: the prompt opened <think>, so the call follows the model's reasoning.
  OJson thinking = chat_body({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "read"}}}}}});
  thinking.erase("chat_template_kwargs");
  ASSERT_EQ(call("/v1/chat/completions", thinking).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), "Let me read it.\n</think>\n\n" + qwen_call("read", {{"path", "/tmp/a"}})));
  EXPECT_FALSE(accepts(engine->last_request(), qwen_call("read", {{"path", "/tmp/a"}})));
}

TEST_F(ServerTest, RequiredToolChoiceAllowsEveryOfferedTool) {
  auto r = call("/v1/chat/completions", chat_body({{"tools", kTools}, {"tool_choice", "required"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto req = engine->last_request();
  EXPECT_TRUE(accepts(req, qwen_call("read", {{"path", "/tmp/a"}})));
  EXPECT_TRUE(accepts(req, qwen_call("write", {{"path", "/tmp/a"}, {"content", "two\nlines"}})));
  EXPECT_FALSE(accepts(req, qwen_call("delete", {{"path", "/tmp/a"}})));
  // tool_choice auto leaves the output free.
  ASSERT_EQ(call("/v1/chat/completions", chat_body({{"tools", kTools}, {"tool_choice", "auto"}})).status, 200);
  EXPECT_FALSE(engine->last_request().grammar);
}

TEST_F(ServerTest, AnthropicToolChoice) {
  OJson tools = OJson::array();
  for (const auto& t : kTools) tools.push_back({{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
  OJson body = {{"model", "kapitsa-test"},
                {"max_tokens", 100},
                {"messages", {{{"role", "user"}, {"content", "read /tmp/a"}}}},
                {"thinking", {{"type", "disabled"}}},
                {"tools", tools},
                {"tool_choice", {{"type", "tool"}, {"name", "write"}}}};
  ASSERT_EQ(call("/v1/messages", body).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), qwen_call("write", {{"path", "p"}, {"content", "c"}})));
  EXPECT_FALSE(accepts(engine->last_request(), qwen_call("read", {{"path", "p"}})));
  body["tool_choice"] = {{"type", "any"}};
  ASSERT_EQ(call("/v1/messages", body).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), qwen_call("read", {{"path", "p"}})));
}

TEST_F(ServerTest, ResponseFormats) {
  const OJson schema = {{"type", "object"},
                        {"properties", {{"n", {{"type", "integer"}}}, {"tag", {{"enum", {"a", "b"}}}}}},
                        {"required", {"n", "tag"}},
                        {"additionalProperties", false}};
  ASSERT_EQ(call("/v1/chat/completions",
                 chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}))
                .status,
            200);
  EXPECT_TRUE(accepts(engine->last_request(), R"({"n": 3, "tag": "b"})"));
  EXPECT_FALSE(accepts(engine->last_request(), R"({"n": 3, "tag": "c"})"));
  EXPECT_FALSE(accepts(engine->last_request(), R"({"n": "3", "tag": "a"})"));

  ASSERT_EQ(call("/v1/chat/completions", chat_body({{"response_format", {{"type", "json_object"}}}})).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), R"({"anything": [1, {"x": null}]})"));
  EXPECT_FALSE(accepts(engine->last_request(), R"([1, 2])"));

  OJson responses = {{"model", "kapitsa-test"},
                     {"input", "give me n"},
                     {"reasoning", {{"effort", "none"}}},
                     {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", schema}}}}}};
  ASSERT_EQ(call("/v1/responses", responses).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), R"({"n": -7, "tag": "a"})"));
  EXPECT_FALSE(accepts(engine->last_request(), R"({"tag": "a"})"));
}

TEST_F(ServerTest, BadConstraintsNameTheField) {
  auto expect_400 = [&](const OJson& body, const std::string& param, const std::string& needle) {
    auto r = call("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    OJson j = json(r);
    EXPECT_EQ(j["error"]["param"], param) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  };
  expect_400(chat_body({{"tool_choice", "required"}}), "tool_choice", "no tools");
  expect_400(chat_body({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "rm"}}}}}}),
             "tool_choice", "\"rm\"");
  expect_400(chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}),
             "response_format", "schema");
}

TEST_F(ServerTest, DefaultGrammarAppliesWhenTheRequestHasNone) {
  ServiceOptions opts;
  auto g = text::parse_gbnf(R"(root ::= "Yes." | "No.")");
  ASSERT_TRUE(g.ok()) << g.error().message;
  opts.default_grammar = *g;
  make("qwen3.5.jinja", 4096, opts);
  ASSERT_EQ(call("/v1/chat/completions", chat_body(OJson::object())).status, 200);
  EXPECT_TRUE(accepts(engine->last_request(), "Yes."));
  EXPECT_FALSE(accepts(engine->last_request(), "Maybe."));
  // A request's own constraint replaces the default.
  ASSERT_EQ(call("/v1/chat/completions", chat_body({{"response_format", {{"type", "json_object"}}}})).status, 200);
  EXPECT_FALSE(accepts(engine->last_request(), "Yes."));
  EXPECT_TRUE(accepts(engine->last_request(), "{}"));
}

}  // namespace
}  // namespace kapitsa::server::testing
