// PromptEncoder reuses an earlier prompt's ids for the prefix two prompts share and encodes the rest;
// its ids must equal a full Tokenizer::encode every time. Checked on the golden corpus (Hugging Face's
// ids, texts wrapped as growing chat conversations, with earlier turns edited, and texts cut at every
// kind of place, mid added token included), and on agent-like traffic: conversations with reasoning,
// tool calls and tool results rendered turn after turn by the Qwen3.5, Qwen3-Coder, Nemotron 3 and
// Nemotron Nano v2 templates through render_chat_prompt (ids and turn boundary as without the encoder).
// Also asserts that the reuse happens (reused_ids), or the test would pass with no speed-up.
#include "text/chat/chat_prompt.h"
#include "text/tokenizer/prompt_encoder.h"
#include "tokenizer_fixture.h"

#include <random>

namespace kapitsa::text {
namespace {

std::shared_ptr<const Tokenizer> shared_qwen3() {
  return std::shared_ptr<const Tokenizer>(std::shared_ptr<const Tokenizer>(), &testing::qwen3_tokenizer());
}

std::string chat_turn(const std::string& role, const std::string& text) {
  return "<|im_start|>" + role + "\n" + text + "<|im_end|>\n";
}

TEST(PromptEncoder, GrowingConversationsOfTheGoldenCorpusEncodeAsAWhole) {
  const auto& golden = testing::qwen3_golden();
  ASSERT_GT(golden.size(), 20u);
  const Tokenizer& tok = testing::qwen3_tokenizer();
  PromptEncoder encoder(shared_qwen3());
  std::string conversation = chat_turn("system", "You are a coding agent.");
  size_t reused_turns = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    conversation += chat_turn(i % 3 == 2 ? "assistant" : "user", golden[i].text);
    const std::string prompt = conversation + "<|im_start|>assistant\n";
    SCOPED_TRACE(::testing::Message() << "turn " << i);
    const PromptEncoder::Encoded e = encoder.encode(prompt);
    ASSERT_EQ(e.ids, tok.encode(prompt));
    if (i > 0) reused_turns += e.reused_ids > 0;
    EXPECT_EQ(tok.decode(e.ids), prompt);
  }
  EXPECT_EQ(reused_turns, golden.size() - 1);
}

TEST(PromptEncoder, EditsAndCutsAnywhereEncodeAsAWhole) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const auto& golden = testing::qwen3_golden();
  const Tokenizer& tok = testing::qwen3_tokenizer();
  PromptEncoder encoder(shared_qwen3(), 4);
  std::vector<std::string> turns;
  for (size_t i = 0; i < 12; ++i) turns.push_back(chat_turn(i % 2 ? "assistant" : "user", golden[rng() % golden.size()].text));
  auto join = [&] {
    std::string s;
    for (const auto& t : turns) s += t;
    return s;
  };
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    std::string prompt = join();
    switch (rng() % 3) {
      case 0:  // an earlier turn rewritten (a client that edits its system prompt or compacts)
        turns[rng() % turns.size()] = chat_turn("user", golden[rng() % golden.size()].text);
        prompt = join();
        break;
      case 1:  // cut anywhere: inside a word, a UTF-8 character or an added token ("<|im_sta")
        prompt.resize(rng() % (prompt.size() + 1));
        break;
      default:  // a new turn
        turns.push_back(chat_turn("tool", golden[rng() % golden.size()].text));
        prompt = join();
    }
    ASSERT_EQ(encoder.encode(prompt).ids, tok.encode(prompt));
  }
}

const OrderedJson kTools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "read_file",
  "description": "Reads a file", "parameters": {"type": "object",
  "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}}}])");

// An agent's session as its requests grow: user task, reasoning + tool call, tool result, ..., answer.
TEST(PromptEncoder, AgentTrafficThroughEachTemplateEncodesAsAWhole) {
  const auto& golden = testing::qwen3_golden();
  auto tok = Tokenizer::load(testing::test_data_path("../models/demo/target"));
  ASSERT_TRUE(tok.ok());
  auto shared = std::make_shared<const Tokenizer>(std::move(tok).value());
  for (const std::string name : {"qwen3.5", "qwen3-coder", "nemotron3-nano", "nemotron-nano-v2"}) {
    auto t = ChatTemplate::from_file(testing::test_data_path("text/data/templates/" + name + ".jinja"));
    ASSERT_TRUE(t.ok());
    for (bool thinking : {true, false}) {
      SCOPED_TRACE(name + (thinking ? " thinking" : " no thinking"));
      PromptEncoder encoder(shared);
      ChatRequest request;
      request.tools = kTools;
      if (!thinking) request.kwargs["enable_thinking"] = false;
      request.messages.push_back({{"role", "system"}, {"content", "You are a coding agent."}});
      request.messages.push_back({{"role", "user"}, {"content", "Fix the bug in mailcap.py"}});
      size_t requests = 0;
      for (size_t step = 0; step < 16; ++step) {
        auto plain = render_chat_prompt(*t, *shared, request);
        auto fast = render_chat_prompt(*t, *shared, request, &encoder);
        ASSERT_TRUE(plain.ok() && fast.ok());
        ASSERT_EQ(fast->ids, plain->ids);
        ASSERT_EQ(fast->ids, shared->encode(plain->text));
        EXPECT_EQ(fast->turn_boundary, plain->turn_boundary);
        ++requests;
        const std::string& code = golden[step % golden.size()].text;
        if (step % 4 == 3) {  // an answer, then the user's next task
          request.messages.push_back({{"role", "assistant"}, {"content", "Done: " + code}, {"reasoning_content", "It works now."}});
          request.messages.push_back({{"role", "user"}, {"content", "Now the tests, please."}});
        } else {
          const std::string id = "call_" + std::to_string(step);
          request.messages.push_back(
              {{"role", "assistant"},
               {"content", ""},
               {"reasoning_content", "Read the file first."},
               {"tool_calls", {{{"id", id}, {"type", "function"},
                                {"function", {{"name", "read_file"}, {"arguments", {{"path", "mailcap.py"}, {"limit", 40}}}}}}}}});
          request.messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", code}});
        }
      }
      // A new user message reuses most of the previous request's ids. (Not with Nemotron Nano v2 here:
      // its turn markers, <SPECIAL_10>…, are plain text to the demo tokenizer, so nothing splits.)
      if (name == "nemotron-nano-v2") continue;
      PromptEncoder counting(shared);
      auto first = render_chat_prompt(*t, *shared, request, &counting);
      request.messages.push_back({{"role", "user"}, {"content", "One more thing."}});
      auto next = counting.encode(render_chat_prompt(*t, *shared, request)->text);
      EXPECT_GT(next.reused_ids, first->ids.size() / 2);
      EXPECT_EQ(requests, 16u);
    }
  }
}

}  // namespace
}  // namespace kapitsa::text
