// Request shapes recorded from real agents (../shared/notes/agents/) replayed through the real
// Qwen3.5 and Nemotron 3 templates: developer roles (Codex, pi), a system message in the middle
// (Claude Code), consecutive user messages (opencode's title request), content part arrays,
// non-function tools, unknown fields, oversized budgets; the Claude billing header kept out of the
// prompt; prefix stability across turns; session keys and turn boundaries passed to the engine.
#include "server_fixture.h"

#include <algorithm>

namespace kapitsa::server::testing {
namespace {

const OJson kReadSchema = OJson::parse(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
  "properties":{"file_path":{"type":"string"},"offset":{"type":"integer","minimum":0,"maximum":9007199254740991},
  "limit":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991}},"required":["file_path"],"additionalProperties":false})");

OJson claude_body(OJson messages) {
  return {{"model", "kapitsa-test"},
          {"messages", std::move(messages)},
          {"system", {{{"type", "text"}, {"text", "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli; cch=81fa2;"}},
                      {{"type", "text"}, {"text", "You are a Claude agent, built on Anthropic's Claude Agent SDK."}, {"cache_control", {{"type", "ephemeral"}}}},
                      {{"type", "text"}, {"text", "\nYou are an interactive agent."}, {"cache_control", {{"type", "ephemeral"}}}}}},
          {"tools", {{{"name", "Read"}, {"description", "Reads a file."}, {"input_schema", kReadSchema}}}},
          {"metadata", {{"user_id", "{\"device_id\":\"d\"}"}}},
          {"max_tokens", 32000},
          {"thinking", {{"type", "adaptive"}}},
          {"context_management", {{"edits", {{{"type", "clear_thinking_20251015"}, {"keep", "all"}}}}}},
          {"output_config", {{"effort", "high"}}},
          {"stream", true}};
}

OJson claude_turn1() {
  return {{{"role", "user"},
           {"content", {{{"type", "text"}, {"text", "<system-reminder>Today is a day.</system-reminder>"}},
                        {{"type", "text"}, {"text", "say hello"}, {"cache_control", {{"type", "ephemeral"}}}}}}},
          {{"role", "system"}, {"content", "Available agent types for the Agent tool:\n- claude: Catch-all."}}};
}

class AgentReplay : public ServerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override { make(GetParam()); }
};

TEST_P(AgentReplay, ClaudeCode) {
  engine->set_default(Script{{"</think>", "Hello."}});
  auto frames = stream(call("/v1/messages?beta=true", claude_body(claude_turn1()),
                            {{"X-Claude-Code-Session-Id", "sess-1"}, {"anthropic-beta", "mid-conversation-system-2026-04-07"}}));
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().event, "message_stop");
  const std::string prompt1 = engine->last_prompt();
  EXPECT_EQ(prompt1.find("x-anthropic-billing-header"), std::string::npos);
  EXPECT_EQ(prompt1.find("cch="), std::string::npos);
  EXPECT_NE(prompt1.find("You are a Claude agent"), std::string::npos);
  EXPECT_NE(prompt1.find("Available agent types"), std::string::npos);  // the mid-conversation system text survives
  EXPECT_NE(prompt1.find("file_path"), std::string::npos);              // the tool reached the prompt
  EXPECT_TRUE(engine->last_request().cache_key.starts_with("sess-1#")) << engine->last_request().cache_key;
  EXPECT_LT(engine->last_request().max_tokens, 4096);  // 32000 clamped
  // The conversation with the reply as history, as the next turn renders it: preloaded under the session.
  ASSERT_EQ(engine->preloads().size(), 1u);
  const std::vector<int32_t> preloaded = engine->preloads().back().first;
  EXPECT_EQ(engine->preloads().back().second, engine->last_request().cache_key);

  // Next turn: the history (with the mid-conversation system message) plus the answer and a new query;
  // a different billing nonce. The first turn's conversation must stay a byte-identical prefix.
  ASSERT_TRUE(engine->last_request().turn_boundary.has_value());
  const auto ids1 = engine->last_request().prompt_ids;
  const size_t boundary1 = *engine->last_request().turn_boundary;
  OJson msgs = claude_turn1();
  msgs.push_back({{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", "Hello."}}}}});
  msgs.push_back({{"role", "user"}, {"content", "thanks"}});
  OJson body = claude_body(msgs);
  body["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli; cch=ffff0;";
  stream(call("/v1/messages?beta=true", body));
  const auto ids2 = engine->last_request().prompt_ids;
  ASSERT_GT(ids2.size(), boundary1);
  EXPECT_TRUE(std::equal(ids1.begin(), ids1.begin() + boundary1, ids2.begin())) << "prefix changed between turns";
  ASSERT_GT(preloaded.size(), boundary1);
  ASSERT_LT(preloaded.size(), ids2.size());
  EXPECT_TRUE(std::equal(preloaded.begin(), preloaded.end(), ids2.begin())) << "the preload is not where turn 2 starts";

  // count_tokens counts the rendered prompt (system + tools + markers), not raw text.
  OJson count = claude_body(claude_turn1());
  count.erase("max_tokens");
  count.erase("stream");
  auto c = call("/v1/messages/count_tokens", count);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(json(c)["input_tokens"].get<size_t>(), ids1.size());
}

TEST_P(AgentReplay, CodexResponses) {
  engine->set_default(Script{{"</think>", "Hello from the model."}});
  OJson body = {
      {"model", "kapitsa-test"},
      {"stream", true},
      {"input",
       {{{"type", "message"}, {"id", "msg_1"}, {"role", "developer"}, {"content", {{{"type", "input_text"}, {"text", "You are a coding agent running in the Codex CLI."}}}}},
        {{"type", "message"}, {"id", "msg_2"}, {"role", "developer"},
         {"content", {{{"type", "input_text"}, {"text", "<skills_instructions>none</skills_instructions>"}},
                      {{"type", "input_text"}, {"text", "<permissions instructions>read-only</permissions instructions>"}}}}},
        {{"type", "message"}, {"id", "msg_3"}, {"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "<environment_context>cwd</environment_context>"}}}}},
        {{"type", "message"}, {"id", "msg_4"}, {"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "say hello"}}}}}}},
      {"tools", OJson::parse(R"([
        {"type":"function","name":"exec_command","description":"Runs a command.","strict":false,
         "parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"],"additionalProperties":false}},
        {"type":"namespace","name":"multi_agent_v1","description":"agents","tools":[
          {"type":"function","name":"spawn_agent","parameters":{"type":"object","properties":{"task":{"type":"string"}}}}]},
        {"type":"web_search","external_web_access":false},
        {"type":"custom","name":"apply_patch","description":"FREEFORM patch","format":{"type":"grammar","syntax":"lark","definition":"start: begin_patch"}},
        {"type":"tool_search","execution":"client","description":"Tool discovery","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}])")},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", true},
      {"reasoning", {{"summary", "auto"}}},
      {"store", false},
      {"include", {"reasoning.encrypted_content"}},
      {"prompt_cache_key", "codex-session"},
      {"client_metadata", {{"x", "y"}}}};
  auto frames = stream(call("/v1/responses", body));
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().event, "response.completed");
  const std::string prompt = engine->last_prompt();
  EXPECT_NE(prompt.find("You are a coding agent"), std::string::npos);
  EXPECT_NE(prompt.find("<permissions instructions>"), std::string::npos);
  EXPECT_NE(prompt.find("spawn_agent"), std::string::npos);  // namespace flattened
  EXPECT_NE(prompt.find("apply_patch"), std::string::npos);  // custom tool offered
  EXPECT_NE(prompt.find("tool_search"), std::string::npos);
  EXPECT_EQ(prompt.find("web_search"), std::string::npos);  // hosted tool dropped
  EXPECT_TRUE(engine->last_request().cache_key.starts_with("codex-session#")) << engine->last_request().cache_key;

  // The retry shape: the previous answer comes back as an assistant item with id and status, then
  // a function call round trip with output given as input_text parts.
  body["input"].push_back({{"type", "message"}, {"status", "completed"}, {"id", "msg_9"}, {"role", "assistant"},
                           {"content", {{{"type", "output_text"}, {"text", "Hello from the model."}}}}});
  body["input"].push_back({{"type", "reasoning"}, {"id", "rs_1"}, {"summary", OJson::array()},
                           {"content", {{{"type", "reasoning_text"}, {"text", "I should list files."}}}}});
  body["input"].push_back({{"type", "function_call"}, {"call_id", "call_1"}, {"name", "exec_command"}, {"arguments", "{\"cmd\":\"ls\"}"}});
  body["input"].push_back({{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", {{{"type", "input_text"}, {"text", "README.md"}}}}});
  body["input"].push_back({{"type", "custom_tool_call"}, {"call_id", "call_2"}, {"name", "apply_patch"}, {"input", "*** Begin Patch\n*** End Patch"}});
  body["input"].push_back({{"type", "custom_tool_call_output"}, {"call_id", "call_2"}, {"output", "Done"}});
  auto again = stream(call("/v1/responses", body));
  EXPECT_EQ(again.back().event, "response.completed");
  const std::string p2 = engine->last_prompt();
  EXPECT_NE(p2.find("README.md"), std::string::npos);
  EXPECT_NE(p2.find("*** Begin Patch"), std::string::npos);
  EXPECT_NE(p2.find("exec_command"), std::string::npos);
}

TEST_P(AgentReplay, OpencodeTitleAndMain) {
  engine->set_default(Script{{"</think>", "Title"}});
  OJson title = {{"model", "kapitsa-test"},
                 {"max_tokens", 4096},
                 {"messages", {{{"role", "system"}, {"content", "You are a title generator. You output ONLY a thread title."}},
                               {{"role", "user"}, {"content", "Generate a title for this conversation:\n"}},
                               {{"role", "user"}, {"content", "\"say hello\""}}}},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
  auto frames = stream(call("/v1/chat/completions", title, {{"x-session-affinity", "ses_1"}, {"x-session-id", "ses_1"}}));
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[frames.size() - 3].data["choices"][0]["finish_reason"], "stop");
  const std::string title_key = engine->last_request().cache_key;
  EXPECT_TRUE(title_key.starts_with("ses_1#")) << title_key;
  EXPECT_NE(engine->last_prompt().find("Generate a title"), std::string::npos);

  // The main conversation of the same session is a cache group of its own (the title request cannot
  // age its snapshots out), and stays that group on its next turn.
  OJson main = title;
  main["messages"] = {{{"role", "system"}, {"content", "You are opencode."}}, {{"role", "user"}, {"content", "\"say hello\""}}};
  main["tools"] = {{{"type", "function"}, {"function", {{"name", "read"}, {"description", "Read a file"}, {"parameters", kReadSchema}}}}};
  main["tool_choice"] = "auto";
  const std::map<std::string, std::string> headers = {{"x-session-affinity", "ses_1"}, {"x-session-id", "ses_1"}};
  EXPECT_EQ(stream(call("/v1/chat/completions", main, headers)).back().data, nullptr);
  const std::string main_key = engine->last_request().cache_key;
  EXPECT_TRUE(main_key.starts_with("ses_1#")) << main_key;
  EXPECT_NE(main_key, title_key);
  main["messages"].push_back({{"role", "assistant"}, {"content", "Title"}});
  main["messages"].push_back({{"role", "user"}, {"content", "and now?"}});
  EXPECT_EQ(stream(call("/v1/chat/completions", main, headers)).back().data, nullptr);
  EXPECT_EQ(engine->last_request().cache_key, main_key);
}

TEST_P(AgentReplay, PiDeveloperPartsAndReasoningReplay) {
  engine->set_default(Script{{"</think>", "ok"}});
  OJson body = {{"model", "kapitsa-test"},
                {"messages", {{{"role", "developer"}, {"content", "You are an expert coding assistant operating inside pi."}},
                              {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "say hello"}}}}},
                              {{"role", "assistant"}, {"content", ""}, {"reasoning_content", "The user greets."},
                               {"tool_calls", {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "read"}, {"arguments", "{\"path\":\"a.txt\"}"}}}}}}},
                              {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "file text"}}}},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}},
                {"store", false},
                {"max_completion_tokens", 4096},
                {"reasoning_effort", "medium"},
                {"tools", {{{"type", "function"}, {"function", {{"name", "read"}, {"description", "Read"}, {"parameters", {{"type", "object"}, {"properties", {{"path", {{"type", "string"}}}}}}}}}, {"strict", false}}}}};
  auto frames = stream(call("/v1/chat/completions", body));
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames[frames.size() - 2].data["usage"]["completion_tokens"], 2);
  const std::string prompt = engine->last_prompt();
  EXPECT_NE(prompt.find("You are an expert coding assistant"), std::string::npos);
  EXPECT_NE(prompt.find("file text"), std::string::npos);
  EXPECT_NE(prompt.find("a.txt"), std::string::npos);  // arguments string parsed into the template's mapping
}

TEST_P(AgentReplay, ThinkingControl) {
  OJson body = {{"model", "kapitsa-test"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  ASSERT_EQ(call("/v1/chat/completions", body).status, 200);
  const std::string off = engine->last_prompt();
  body.erase("chat_template_kwargs");
  ASSERT_EQ(call("/v1/chat/completions", body).status, 200);
  const std::string on = engine->last_prompt();
  EXPECT_NE(off, on);
  EXPECT_TRUE(on.ends_with("<think>\n"));
  body["reasoning_effort"] = "none";
  ASSERT_EQ(call("/v1/chat/completions", body).status, 200);
  EXPECT_EQ(engine->last_prompt(), off);
  OJson a = {{"model", "kapitsa-test"}, {"max_tokens", 5}, {"thinking", {{"type", "disabled"}}}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  ASSERT_EQ(call("/v1/messages", a).status, 200);
  EXPECT_EQ(engine->last_prompt(), off);
}

INSTANTIATE_TEST_SUITE_P(Templates, AgentReplay, ::testing::Values("qwen3.5.jinja", "nemotron3-nano.jinja"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')) == "qwen3" ? std::string("qwen35") : std::string("nemotron3"); });

TEST(Conversation, Normalisation) {
  OJson msgs = {{{"role", "developer"}, {"content", "A"}},
                {{"role", "system"}, {"content", {{{"type", "text"}, {"text", "B"}}}}},
                {{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "q"}}, {{"type", "refusal"}, {"refusal", ""}}}}},
                {{"role", "system"}, {"content", "mid"}},
                {{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r"}},
                {{"role", "system"}, {"content", "after assistant"}},
                {{"role", "system"}, {"content", "x-anthropic-billing-header: cch=1;"}}};
  auto r = normalize_messages(msgs);
  ASSERT_TRUE(std::holds_alternative<OJson>(r));
  OJson out = std::get<OJson>(r);
  OJson expected = OJson::parse(R"([{"role":"system","content":"A\n\nB"},{"role":"user","content":"q\n\nmid"},
    {"role":"assistant","content":"","reasoning_content":"r"},{"role":"user","content":"after assistant"}])");
  EXPECT_EQ(out, expected) << out.dump();
  OJson calls = {{{"role", "user"}, {"content", "q"}},
                 {{"role", "assistant"}, {"content", ""}, {"tool_calls", {
                    {{"id", "1"}, {"function", {{"name", "f"}, {"arguments", "{\"a\": 1}"}}}},
                    {{"id", "2"}, {"function", {{"name", "f"}, {"arguments", "not json"}}}},
                    {{"id", "3"}, {"function", {{"name", "f"}, {"arguments", ""}}}}}}}};
  OJson norm = std::get<OJson>(normalize_messages(calls));
  EXPECT_EQ(norm[1]["tool_calls"][0]["function"]["arguments"], OJson::parse(R"({"a":1})"));
  EXPECT_EQ(norm[1]["tool_calls"][1]["function"]["arguments"], OJson::parse(R"({"raw":"not json"})"));
  EXPECT_EQ(norm[1]["tool_calls"][2]["function"]["arguments"], OJson::object());
  EXPECT_EQ(strip_volatile_lines("x-anthropic-billing-header: a;\nKeep me\n"), "Keep me\n");
}

TEST(Conversation, Tools) {
  OJson tools = OJson::parse(R"([
    {"type":"function","function":{"name":"a","parameters":{"type":"object"},"strict":true}},
    {"type":"function","name":"b","description":"flat"},
    {"name":"c","input_schema":{"type":"object","properties":{}}},
    {"type":"namespace","name":"ns","tools":[{"type":"function","name":"d"}]},
    {"type":"custom","name":"e","format":{"type":"grammar"}},
    {"type":"tool_search","execution":"client","parameters":{"type":"object"}},
    {"type":"web_search"},
    {"type":"web_search_20250305","name":"web_search"},
    {"type":"function","name":"a","description":"duplicate"}])");
  auto r = normalize_tools(tools, "tools");
  ASSERT_TRUE(std::holds_alternative<NormalizedTools>(r));
  const auto& n = std::get<NormalizedTools>(r);
  std::vector<std::string> names;
  for (const auto& t : n.tools) {
    EXPECT_EQ(t["type"], "function");
    EXPECT_FALSE(t["function"].contains("strict"));
    names.push_back(t["function"]["name"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d", "e", "tool_search"}));
  EXPECT_EQ(n.custom_names, std::set<std::string>{"e"});
  auto only_hosted = normalize_tools(OJson::parse(R"([{"type":"web_search"}])"), "tools");
  EXPECT_TRUE(std::get<NormalizedTools>(only_hosted).tools.is_null());
}

}  // namespace
}  // namespace kapitsa::server::testing
