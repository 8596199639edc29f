// render_next_turn_history: the conversation with a reply as history, as the next request renders it,
// is a prefix of that next request's prompt (text and ids) and holds the reply — for the Qwen3.5,
// Qwen3-Coder and Nemotron 3 templates, thinking on and off, after an answer (a user message follows:
// Qwen3.5 and Nemotron 3 drop the reply's reasoning) and after a tool call (its result follows: the
// reasoning stays).
#include "test_util.h"
#include "text/chat/chat_template.h"
#include "text/chat/next_turn.h"
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

namespace kapitsa::text {
namespace {

TEST(NextTurn, HistoryIsAPrefixOfTheNextRequest) {
  auto tok = Tokenizer::load(testing::test_data_path("../models/demo/target"));
  ASSERT_TRUE(tok.ok());
  const OrderedJson tools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  int checked = 0;
  for (const std::string name : {"qwen3.5", "qwen3-coder", "nemotron3-nano"}) {
    auto t = ChatTemplate::from_file(testing::test_data_path("text/data/templates/" + name + ".jinja"));
    ASSERT_TRUE(t.ok());
    for (bool thinking : {true, false}) {
      for (bool tool : {false, true}) {
        SCOPED_TRACE(name + (thinking ? " thinking" : " no thinking") + (tool ? " tool call" : " answer"));
        ChatRequest request;
        request.tools = tools;
        if (!thinking) request.kwargs["enable_thinking"] = false;
        request.messages = OrderedJson::array({{{"role", "system"}, {"content", "You are terse."}},
                                               {{"role", "user"}, {"content", "Weather in Paris?"}}});
        auto turn1 = t->render(request);
        ASSERT_TRUE(turn1.ok());
        OrderedJson reply = {{"role", "assistant"}, {"content", tool ? "" : "It is sunny."}};
        if (thinking) reply["reasoning_content"] = "Look it up.";
        if (tool)
          reply["tool_calls"] = {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}};
        auto history = render_next_turn_history(*t, request, reply);
        ASSERT_TRUE(history.ok()) << history.error().message;

        ChatRequest next = request;
        next.messages.push_back(reply);
        next.messages.push_back(tool ? OrderedJson{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "Sunny, 21 C."}}
                                     : OrderedJson{{"role", "user"}, {"content", "And tomorrow?"}});
        auto rendered = t->render(next);
        ASSERT_TRUE(rendered.ok());
        ASSERT_TRUE(rendered->starts_with(*history)) << *history << "\n--- next request:\n" << *rendered;
        const std::string rest = rendered->substr(history->size());
        EXPECT_TRUE(rest.starts_with("<|im_start|>user\n")) << rest;
        EXPECT_NE(history->find(tool ? "Paris" : "It is sunny."), std::string::npos);
        EXPECT_EQ(rest.find(tool ? "get_weather>" : "It is sunny."), std::string::npos) << rest;
        // Past the first turn's history (the reply's turn is in it), and a prefix in ids too.
        ChatRequest hist1 = request;
        hist1.add_generation_prompt = false;
        EXPECT_GT(history->size(), t->render(hist1)->size());
        const std::vector<int32_t> a = tok->encode(*history), b = tok->encode(*rendered);
        ASSERT_LT(a.size(), b.size());
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace
}  // namespace kapitsa::text
