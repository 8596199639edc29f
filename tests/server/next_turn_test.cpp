// Every token prefilled once, through the server on a real demo model (server_test_model_dir): after a reply, the server
// preloads the conversation as the next request will render it (Qwen3.5 and Nemotron 3 drop an earlier
// reply's reasoning; tool calls in their history form), so turn 2 — the client's echo of the reply
// plus a new user message or the tool's result — reuses every token before the new message and
// prefills only the rest. Checked for the Qwen3.5, Qwen3-Coder and Nemotron 3 templates, thinking on
// and off, a plain answer and a tool call, on chat completions, Responses and Anthropic messages
// (their own echo shapes), with the engine's counters and each API's usage.
// The replies are forced by a grammar (the demo model knows no tools): the text is fixed, the tokens
// are the model's.
#include "logging_engine.h"
#include "server_fixture.h"
#include "test_util.h"
#include "text/grammar/grammar.h"

#include "models/model.h"
#include "runtime/engine.h"

#include <cstdio>

namespace kapitsa::server::testing {
namespace {

const OJson kWeatherTool = OJson::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");

enum class Api { chat, responses, anthropic };
const char* api_name(Api a) { return a == Api::chat ? "chat" : a == Api::responses ? "responses" : "anthropic"; }

// The real engine, with a log of the prompts submitted to it.
using Recorder = LoggingEngine;

std::shared_ptr<Recorder> demo_engine() {
  auto model = models::load_model(server_test_model_dir());
  if (!model.ok()) throw std::runtime_error(model.error().message);
  runtime::EngineOptions o;
  o.context_tokens = 4096;
  o.max_sequences = 2;
  auto e = runtime::Engine::create(std::move(model).value(), demo_tokenizer(), o);
  if (!e.ok()) throw std::runtime_error(e.error().message);
  return std::make_shared<Recorder>(std::move(e).value());
}

// GBNF for one fixed text.
std::string exactly(const std::string& text) {
  std::string g = "root ::= \"";
  for (char c : text) g += c == '\n' ? std::string("\\n") : c == '"' ? std::string("\\\"") : std::string(1, c);
  return g + "\"";
}

struct Case {
  std::string template_name;
  bool thinking = true;
  bool tool = false;
  Api api = Api::chat;
};

class NextTurn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = demo_engine(); }
  static void TearDownTestSuite() { engine_.reset(); }
  static OJson json(const HttpResponse& r) { return OJson::parse(r.body, nullptr, false); }

  // Turn 1 (system + user, the weather tool offered), the reply forced, then the client's turn 2:
  // the reply as that API echoes it and a new user message (or the tool's result).
  void run(const Case& c, int n) {
    SCOPED_TRACE(::testing::Message() << c.template_name << (c.thinking ? " thinking" : " no thinking")
                                      << (c.tool ? " tool call" : " answer") << " " << api_name(c.api));
    const bool reasons = c.thinking && c.template_name != "qwen3-coder.jinja";
    std::string reply = reasons ? "Look it up.\n</think>\n\n" : "";
    reply += c.tool ? "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
                    : "It is sunny.";
    ServiceOptions opts;
    opts.model_ids = {"kapitsa-test"};
    auto grammar = text::parse_gbnf(exactly(reply));
    ASSERT_TRUE(grammar.ok()) << grammar.error().message;
    opts.default_grammar = *grammar;
    Service service(opts);
    service.set_model(engine_, load_template(c.template_name));
    HttpServer transport(service, TransportOptions{.log_requests = false});
    auto post = [&](const std::string& path, const OJson& body) {
      HttpRequest r;
      r.method = "POST";
      r.path = path;
      r.body = body.dump();
      r.set_header("x-session-affinity", "conversation-" + std::to_string(n));
      return transport.route(r);
    };

    const std::string system = "Case " + std::to_string(n) + ": you are terse.";
    const std::string question = "Weather in Paris?";
    const std::string result = "Sunny, 21 C.", follow_up = "Thanks! And tomorrow?";
    OJson body = {{"model", "kapitsa-test"}, {"max_tokens", 200}};
    if (!c.thinking) body["chat_template_kwargs"] = {{"enable_thinking", false}};
    if (c.api == Api::chat) {
      body["messages"] = {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", question}}};
      body["tools"] = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", kWeatherTool}}}}};
    } else if (c.api == Api::responses) {
      body["instructions"] = system;
      body["input"] = {{{"type", "message"}, {"role", "user"}, {"content", question}}};
      body["tools"] = {{{"type", "function"}, {"name", "get_weather"}, {"parameters", kWeatherTool}}};
    } else {
      body["system"] = system;
      body["messages"] = {{{"role", "user"}, {"content", question}}};
      body["tools"] = {{{"name", "get_weather"}, {"input_schema", kWeatherTool}}};
    }
    const std::string path = c.api == Api::chat ? "/v1/chat/completions" : c.api == Api::responses ? "/v1/responses" : "/v1/messages";
    const runtime::EngineCounters start = engine_->counters();
    const int64_t folded_before = start.end_of_turn_tokens;
    auto r1 = post(path, body);
    const int64_t turn1_prompt = engine_->counters().prompt_tokens - start.prompt_tokens;
    ASSERT_EQ(r1.status, 200) << r1.body;
    const OJson a1 = json(r1);

    // The client's next request: its echo of the reply, then the new message.
    if (c.api == Api::chat) {
      const OJson message = a1["choices"][0]["message"];
      ASSERT_EQ(message.contains("tool_calls"), c.tool) << message.dump();
      body["messages"].push_back(message);
      if (c.tool) body["messages"].push_back({{"role", "tool"}, {"tool_call_id", message["tool_calls"][0]["id"]}, {"content", result}});
      else body["messages"].push_back({{"role", "user"}, {"content", follow_up}});
    } else if (c.api == Api::responses) {
      std::string call_id;
      for (const OJson& item : a1["output"]) {
        body["input"].push_back(item);
        if (item["type"] == "function_call") call_id = item["call_id"];
      }
      ASSERT_EQ(!call_id.empty(), c.tool) << a1.dump();
      if (c.tool) body["input"].push_back({{"type", "function_call_output"}, {"call_id", call_id}, {"output", result}});
      else body["input"].push_back({{"type", "message"}, {"role", "user"}, {"content", follow_up}});
    } else {
      body["messages"].push_back({{"role", "assistant"}, {"content", a1["content"]}});
      std::string id;
      for (const OJson& block : a1["content"])
        if (block["type"] == "tool_use") id = block["id"];
      ASSERT_EQ(!id.empty(), c.tool) << a1.dump();
      if (c.tool)
        body["messages"].push_back({{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", id}, {"content", result}}}}});
      else body["messages"].push_back({{"role", "user"}, {"content", follow_up}});
    }

    const runtime::EngineCounters before = engine_->counters();
    auto r2 = post(path, body);
    ASSERT_EQ(r2.status, 200) << r2.body;
    const runtime::EngineCounters after = engine_->counters();
    const OJson a2 = json(r2);

    // What turn 2 should reuse: its prompt up to the turn that carries the new message (all three
    // templates open it with "<|im_start|>user", tool results included), found in the prompt's text.
    const int64_t prompt_tokens = after.prompt_tokens - before.prompt_tokens;
    const int64_t reused = after.prompt_tokens_reused - before.prompt_tokens_reused;
    const int64_t prefilled = after.prompt_tokens_prefilled - before.prompt_tokens_prefilled;
    const std::vector<int32_t> ids = engine_->last_prompt();
    ASSERT_EQ(static_cast<int64_t>(ids.size()), prompt_tokens);
    const std::string text = demo_tokenizer()->decode(ids);
    const size_t new_turn = text.rfind("<|im_start|>user");
    ASSERT_NE(new_turn, std::string::npos);
    const int64_t expected = static_cast<int64_t>(demo_tokenizer()->encode(text.substr(0, new_turn)).size());
    EXPECT_EQ(reused, expected) << "turn 2 prompt:\n" << text;
    EXPECT_EQ(prefilled, prompt_tokens - reused);
    EXPECT_GT(reused, turn1_prompt);  // the reply itself came from the cache, not just turn 1's prompt
    std::printf("%-22s %-11s %-6s %-9s turn 1 prompt %3lld, turn 2 prompt %3lld: cached %3lld, prefilled %2lld\n",
                c.template_name.c_str(), c.thinking ? "thinking" : "no-thinking", c.tool ? "tool" : "answer", api_name(c.api),
                static_cast<long long>(turn1_prompt), static_cast<long long>(prompt_tokens), static_cast<long long>(reused),
                static_cast<long long>(prefilled));
    EXPECT_GT(after.end_of_turn_tokens, folded_before);  // the preload was folded in the background
    // The API's own usage says the same.
    if (c.api == Api::chat) {
      EXPECT_EQ(a2["usage"]["prompt_tokens"].get<int64_t>(), prompt_tokens);
      EXPECT_EQ(a2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), reused);
    } else if (c.api == Api::responses) {
      EXPECT_EQ(a2["usage"]["input_tokens"].get<int64_t>(), prompt_tokens);
      EXPECT_EQ(a2["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>(), reused);
    } else {
      EXPECT_EQ(a2["usage"]["cache_read_input_tokens"].get<int64_t>(), reused);
      EXPECT_EQ(a2["usage"]["input_tokens"].get<int64_t>(), prompt_tokens - reused);
    }
  }

  static std::shared_ptr<Recorder> engine_;
};

std::shared_ptr<Recorder> NextTurn::engine_;

TEST_F(NextTurn, Turn2PrefillsOnlyTheNewMessage) {
  int n = 0;
  int combination = 0;
  for (const std::string name : {"qwen3.5.jinja", "qwen3-coder.jinja", "nemotron3-nano.jinja"})
    for (bool thinking : {true, false})
      for (bool tool : {false, true}) {
        int api_index = 0;
        for (Api api : {Api::chat, Api::responses, Api::anthropic}) {
          // The sanitizer pass runs each template/thinking/tool combination through one API, in turn.
          const bool keep = !kapitsa::testing::kUnderAddressSanitizer || api_index++ == combination % 3;
          if (keep) run(Case{name, thinking, tool, api}, ++n);
        }
        ++combination;
      }
}

}  // namespace
}  // namespace kapitsa::server::testing
