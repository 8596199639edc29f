// Replays of real agent traffic (issue 17 part 3): sessions of opencode, Claude Code, Codex and pi,
// recorded against `kapitsa serve` on the demo model (tests/agents/record_session.mjs; two user turns,
// each a forced read-tool call, its result and a one-sentence answer), are sent again, request by
// request and with the agent's session headers, through the server on a real demo model (server_test_model_dir). Each reply
// is forced to the recorded one (a grammar for its exact text), so the agent's next request — recorded
// with its echo of that reply — follows what the server generated. From the second turn of the main
// conversation (the requests that offer tools) on, the test asserts from the engine's counters that the
// cache served everything before the new message (the tool results or the user's next message): no
// token of the previous prompt or of the reply is prefilled again. Were the agent itself to change its
// history (none of the four did in these sessions), the test fails and says where. Every prompt's ids
// (the server reuses the previous request's and encodes the tail) must equal a full tokenization.
// The sessions are replayed shrunk (agent_session.h shrink_session: the same cuts on every request) so
// that the four take seconds; bench/bench_agent_session replays them whole.
#include "agent_session.h"
#include "server_fixture.h"

#include "models/model.h"

#include <cstdio>

namespace kapitsa::server::testing {
namespace {

using replay::exactly;
using replay::load_session;
using replay::raw_reply;
using replay::Recorded;
using replay::Replayer;

class RecordedSession : public ::testing::Test {
 protected:
  void replay(const std::string& agent) {
    std::vector<Recorded> session = load_session(data_path("fixtures/agents/" + agent + ".jsonl"));
    replay::shrink_session(session);
    ASSERT_GE(session.size(), 4u);
    auto model = models::load_model(server_test_model_dir());
    ASSERT_TRUE(model.ok()) << model.error().message;
    runtime::EngineOptions eo;
    eo.context_tokens = 32768;
    eo.max_sequences = 2;
    auto inner = runtime::Engine::create(std::move(model).value(), demo_tokenizer(), eo);
    ASSERT_TRUE(inner.ok()) << inner.error().message;
    auto engine = std::make_shared<Replayer>(std::move(inner).value());
    ServiceOptions opts;
    opts.accept_any_model = true;
    opts.template_kwargs = {{"enable_thinking", false}};  // as recorded: kapitsa serve --no-think
    Service service(opts);
    service.set_model(engine, load_template("qwen3.5.jinja"));
    HttpServer transport(service, TransportOptions{.log_requests = false});
    const text::Tokenizer& tok = *demo_tokenizer();

    std::string previous;  // the main conversation's previous prompt, as text
    int turn = 0;
    for (size_t i = 0; i < session.size(); ++i) {
      const Recorded& rec = session[i];
      const bool main = replay::offers_tools(rec);
      const replay::Turn t = replay::replay_request(transport, *engine, rec);
      ASSERT_EQ(t.response.status, 200) << agent << " request " << i << ": " << t.response.body.substr(0, 500);
      const int64_t prompt = t.prompt, reused = t.reused, prefilled = t.prefilled;
      EXPECT_EQ(prefilled, prompt - reused);
      const std::string text = tok.decode(t.ids);
      // The server encodes only the tail after the previous request's ids (text::PromptEncoder): its ids
      // must equal a full tokenization of the prompt, on the agents' own traffic.
      EXPECT_EQ(t.ids, tok.encode(text)) << agent << " request " << i << ": the reused ids differ from a full encode";
      std::printf("%-8s request %zu%s: prompt %5lld, cached %5lld, prefilled %5lld\n", agent.c_str(), i,
                  main ? "" : " (side)", static_cast<long long>(prompt), static_cast<long long>(reused),
                  static_cast<long long>(prefilled));
      if (!main) continue;
      if (turn++ > 0) {
        SCOPED_TRACE(::testing::Message() << agent << " request " << i << " (main turn " << turn << ")");
        // The previous prompt's history: all before its generation prompt.
        const std::string history = previous.substr(0, previous.rfind("<|im_start|>assistant"));
        size_t same = 0;
        while (same < history.size() && same < text.size() && history[same] == text[same]) ++same;
        // The recorded agents never change their history between turns (docs/agents.md: Claude Code moves
        // its cache_control marks and re-sends a user message's parts as a string, which render alike).
        ASSERT_EQ(same, history.size()) << "the agent changed its history: was\n"
                                        << history.substr(same, 200) << "\nnow\n" << text.substr(same, 200);
        // New material starts at the turn after the echoed reply (a tool result or a user message: both
        // open "<|im_start|>user" in this template); everything before it must come from the cache.
        const size_t fresh = text.find("<|im_start|>user", history.size());
        ASSERT_NE(fresh, std::string::npos) << text.substr(history.size());
        const int64_t expected = static_cast<int64_t>(tok.encode(text.substr(0, fresh)).size());
        EXPECT_GT(expected, static_cast<int64_t>(tok.encode(history).size()));  // the reply's echo is in it
        EXPECT_EQ(reused, expected) << "prefilled again:\n"
                                    << tok.decode(std::vector<int32_t>(t.ids.begin() + std::min(reused, expected), t.ids.begin() + expected));
      }
      previous = text;
    }
    EXPECT_GE(turn, 4) << "a recorded session has two user turns, each with a tool call";
  }
};

TEST_F(RecordedSession, Pi) { replay("pi"); }
TEST_F(RecordedSession, Codex) { replay("codex"); }
TEST_F(RecordedSession, Opencode) { replay("opencode"); }
TEST_F(RecordedSession, Claude) { replay("claude"); }

}  // namespace
}  // namespace kapitsa::server::testing
