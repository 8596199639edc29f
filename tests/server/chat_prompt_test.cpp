// The server and `kapitsa chat` build the same engine request for the same conversation: what the
// server submits (prompt ids, turn boundary) equals text::render_chat_prompt's
// result, the function `kapitsa chat`/`run` call — for the Qwen3.5, Qwen3-Coder and Nemotron 3
// templates, thinking on and off, with and without tools.
#include "server_fixture.h"
#include "text/chat/chat_prompt.h"

namespace kapitsa::server::testing {
namespace {

// The conversation as `kapitsa chat` keeps it: plain messages, the last reply with its reasoning.
OJson chat_history() {
  return OJson::array({{{"role", "system"}, {"content", "You are terse."}},
                       {{"role", "user"}, {"content", "Hello!"}},
                       {{"role", "assistant"}, {"content", "Hi."}, {"reasoning_content", "Greet back."}},
                       {{"role", "user"}, {"content", "Weather in Paris?"}}});
}

const OJson kTools = OJson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather for a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

TEST_F(ServerTest, ServerAndCliBuildTheSameEngineRequest) {
  int compared = 0;
  for (const std::string name : {"qwen3.5.jinja", "qwen3-coder.jinja", "nemotron3-nano.jinja", "nemotron-nano-v2.jinja"}) {
    make(name);
    const auto chat_template = load_template(name);
    for (bool thinking : {true, false}) {
      for (bool tools : {false, true}) {
        SCOPED_TRACE(name + (thinking ? " thinking" : " no thinking") + (tools ? " tools" : ""));
        OJson body = {{"model", "kapitsa-test"}, {"messages", chat_history()}};
        text::ChatRequest cli;  // what chat.cpp renders: the history, enable_thinking=false for --no-think
        cli.messages = chat_history();
        if (!thinking) {
          body["chat_template_kwargs"] = {{"enable_thinking", false}};
          cli.kwargs["enable_thinking"] = false;
        }
        if (tools) {
          body["tools"] = kTools;
          cli.tools = kTools;
        }
        auto r = call("/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << r.body;
        const runtime::GenerateRequest served = engine->last_request();

        auto p = text::render_chat_prompt(*chat_template, *demo_tokenizer(), cli);
        ASSERT_TRUE(p.ok()) << p.error().message;
        EXPECT_EQ(served.prompt_ids, p->ids);
        ASSERT_TRUE(served.turn_boundary.has_value());
        EXPECT_EQ(served.turn_boundary, p->turn_boundary);
        // The end of the reply's turn comes from the preload of the next turn instead (next_turn_test).
        EXPECT_TRUE(served.end_of_turn_ids.empty());
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 16);
}

}  // namespace
}  // namespace kapitsa::server::testing
