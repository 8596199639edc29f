// text::render_chat_prompt and ChatFormat, the chat-prompt module the server and `kapitsa chat`/`run`
// share: formats detected per template (Qwen3.5, Qwen3-Coder, Nemotron 3, Nemotron Nano v2, Qwen3),
// the prompt equal to the template's render, the turn boundary at the history's end, the end-of-turn
// ids equal to what the template writes after a reply, and the reply parser reading each template's
// own tool-call syntax (Nemotron's <TOOLCALL> is not Qwen's XML) — thinking on and off.
#include "test_util.h"
#include "text/chat/chat_prompt.h"

#include <gtest/gtest.h>

namespace kapitsa::text {
namespace {

const std::string kDir = testing::test_data_path("text/data/templates/");

const Tokenizer& demo_tokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::load(testing::test_data_path("../models/demo/target"));
    if (!t.ok()) throw std::runtime_error(t.error().message);
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

ChatTemplate load(const std::string& name) {
  auto t = ChatTemplate::from_file(kDir + name + ".jinja");
  if (!t.ok()) throw std::runtime_error(t.error().message);
  return std::move(t).value();
}

const OrderedJson kTools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather for a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");

// A conversation as `kapitsa chat` keeps it (a reply with its reasoning) and with a tool round trip.
OrderedJson history(bool with_tool_call) {
  OrderedJson m = OrderedJson::array();
  m.push_back({{"role", "system"}, {"content", "You are terse."}});
  m.push_back({{"role", "user"}, {"content", "Hello!"}});
  m.push_back({{"role", "assistant"}, {"content", "Hi."}, {"reasoning_content", "Greet back."}});
  if (with_tool_call) {
    m.push_back({{"role", "user"}, {"content", "Weather in Paris?"}});
    m.push_back({{"role", "assistant"},
                 {"content", ""},
                 {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                  {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}});
    m.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}});
  } else {
    m.push_back({{"role", "user"}, {"content", "And now?"}});
  }
  return m;
}

ParseEvents parse_all(const ParserOptions& options, const std::string& reply) {
  OutputParser parser(options);
  ParseEvents events = parser.feed(reply);
  for (auto& e : parser.finish()) events.push_back(std::move(e));
  return events;
}

std::vector<ToolCall> calls_in(const ParseEvents& events) {
  std::vector<ToolCall> calls;
  for (const auto& e : events)
    if (e.kind == ParseEvent::Kind::tool_call) calls.push_back(e.call);
  return calls;
}

TEST(ChatPrompt, FormatsComeFromTheTemplate) {
  EXPECT_EQ(load("qwen3.5").format(), (ChatFormat{ToolFormat::qwen_xml, true}));
  EXPECT_EQ(load("qwen3-coder").format(), (ChatFormat{ToolFormat::qwen_xml, false}));
  EXPECT_EQ(load("nemotron3-nano").format(), (ChatFormat{ToolFormat::qwen_xml, true}));
  EXPECT_EQ(load("nemotron-nano-v2").format(), (ChatFormat{ToolFormat::nemotron, true}));
  EXPECT_EQ(load("qwen3").format(), (ChatFormat{ToolFormat::hermes_json, true}));
}

TEST(ChatPrompt, PromptBoundaryAndEndOfTurnIdsMatchTheTemplate) {
  const Tokenizer& tok = demo_tokenizer();
  for (const std::string name : {"qwen3.5", "qwen3-coder", "nemotron3-nano", "nemotron-nano-v2"}) {
    const ChatTemplate t = load(name);
    for (bool thinking : {true, false}) {
      for (bool tools : {false, true}) {
        SCOPED_TRACE(name + (thinking ? " thinking" : " no thinking") + (tools ? " tools" : ""));
        ChatRequest request;
        request.messages = history(tools);
        if (tools) request.tools = kTools;
        if (!thinking) request.kwargs["enable_thinking"] = false;
        auto p = render_chat_prompt(t, tok, request);
        ASSERT_TRUE(p.ok()) << p.error().message;

        auto full = t.render(request);
        ASSERT_TRUE(full.ok());
        EXPECT_EQ(p->text, *full);
        EXPECT_EQ(p->ids, tok.encode(*full));

        ChatRequest no_generation = request;
        no_generation.add_generation_prompt = false;
        auto hist = t.render(no_generation);
        ASSERT_TRUE(hist.ok());
        ASSERT_TRUE(p->turn_boundary.has_value());
        ASSERT_LT(*p->turn_boundary, p->ids.size());
        EXPECT_EQ(tok.decode({p->ids.begin(), p->ids.begin() + static_cast<std::ptrdiff_t>(*p->turn_boundary)}), *hist);

        // A reply rendered as history is followed by exactly the end-of-turn ids' text.
        ASSERT_FALSE(p->end_of_turn_ids.empty());
        const std::string after = tok.decode(p->end_of_turn_ids);
        ChatRequest replied = no_generation;
        replied.messages.push_back({{"role", "assistant"}, {"content", "Sunny all week."}});
        auto with_reply = t.render(replied);
        ASSERT_TRUE(with_reply.ok());
        EXPECT_TRUE(with_reply->ends_with("Sunny all week." + after)) << *with_reply << "\n--- after: " << after;

        // The reply parser: reasoning as the template does it; tools only when offered.
        EXPECT_EQ(p->format, t.format());
        EXPECT_EQ(p->parser.reasoning, t.format().reasoning);
        EXPECT_EQ(p->parser.starts_in_reasoning, t.format().reasoning && prompt_opens_reasoning(p->text));
        EXPECT_EQ(p->parser.tools, tools ? t.format().tools : ToolFormat::none);
        const GrammarStart start = p->grammar_start();
        EXPECT_EQ(start.in_reasoning, p->parser.starts_in_reasoning);
        EXPECT_FALSE(start.in_reasoning && start.may_open_reasoning);
      }
    }
  }
}

TEST(ChatPrompt, ThinkingOnOpensReasoningAndOffClosesIt) {
  const Tokenizer& tok = demo_tokenizer();
  for (const std::string name : {"qwen3.5", "nemotron3-nano"}) {
    SCOPED_TRACE(name);
    const ChatTemplate t = load(name);
    ChatRequest request;
    request.messages = history(false);
    auto on = render_chat_prompt(t, tok, request);
    ASSERT_TRUE(on.ok());
    EXPECT_TRUE(on->parser.starts_in_reasoning) << on->text;
    EXPECT_TRUE(on->grammar_start().in_reasoning);
    request.kwargs["enable_thinking"] = false;
    auto off = render_chat_prompt(t, tok, request);
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->parser.starts_in_reasoning) << off->text;
    EXPECT_FALSE(off->grammar_start().in_reasoning);
    EXPECT_FALSE(off->grammar_start().may_open_reasoning) << off->text;  // the prompt closed an empty block
  }
  auto coder = render_chat_prompt(load("qwen3-coder"), tok, ChatRequest{history(false)});
  ASSERT_TRUE(coder.ok());
  EXPECT_FALSE(coder->parser.reasoning);
  EXPECT_FALSE(coder->grammar_start().may_open_reasoning);
}

// Each template's reply parser reads its own tool-call syntax and shows another's as text.
TEST(ChatPrompt, ToolCallsAreParsedInTheTemplatesOwnSyntax) {
  const std::string nemotron_reply =
      "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}]</TOOLCALL>";
  const std::string qwen_reply =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
      "</function>\n</tool_call>";
  const std::string hermes_reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";
  struct Case {
    std::string template_name, own_reply, other_reply;
  };
  const Case cases[] = {{"nemotron-nano-v2", nemotron_reply, qwen_reply},
                        {"nemotron3-nano", qwen_reply, nemotron_reply},
                        {"qwen3.5", qwen_reply, nemotron_reply},
                        {"qwen3-coder", qwen_reply, nemotron_reply},
                        {"qwen3", hermes_reply, nemotron_reply}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.template_name);
    ChatRequest request;
    request.messages = history(false);
    request.tools = kTools;
    request.kwargs["enable_thinking"] = false;
    auto p = render_chat_prompt(load(c.template_name), demo_tokenizer(), request);
    ASSERT_TRUE(p.ok()) << p.error().message;
    // Nemotron Nano v2 ignores enable_thinking (it reads /no_think): its reply then closes reasoning first.
    const std::string lead = p->parser.starts_in_reasoning ? "Look it up.\n</think>\n" : "";
    const std::vector<ToolCall> calls = calls_in(parse_all(p->parser, lead + c.own_reply));
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(OrderedJson::parse(calls[0].arguments), OrderedJson::parse(R"({"city": "Paris", "days": 2})"));
    EXPECT_TRUE(calls_in(parse_all(p->parser, lead + c.other_reply)).empty());
  }
}

}  // namespace
}  // namespace kapitsa::text
