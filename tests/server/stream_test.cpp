// Golden SSE event sequences for each API (text, reasoning, tool calls) and the ending of every
// stream on every path: normal stop, length limit, engine error, client disconnect.
#include "server_fixture.h"

namespace kapitsa::server::testing {
namespace {

using Strings = std::vector<std::string>;

OJson chat_body(bool stream = true) {
  return {{"model", "kapitsa-test"},
          {"messages", {{{"role", "user"}, {"content", "hi"}}}},
          {"stream", stream},
          {"stream_options", {{"include_usage", true}}}};
}

const OJson kTools = OJson::parse(R"([{"type":"function","function":{"name":"read","description":"Read a file",
  "parameters":{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"}},"required":["path"]}}}])");

// What a Qwen3.5 model writes for: reasoning, then a tool call (the prompt already opened <think>).
Script reasoning_then_call() {
  return Script{{"Let me", " look.", "\n</think>\n\n", "<tool_call>\n<function=read>\n<parameter=path>\n/etc/hosts\n",
                 "</parameter>\n<parameter=limit>\n10\n</parameter>\n</function>\n</tool_call>"}};
}

TEST_F(ServerTest, ChatStreamGoldenText) {
  engine->push(Script{{"\n", "</think>\n\n", "Hello", " world"}, runtime::FinishReason::stop});
  auto frames = stream(call("/v1/chat/completions", chat_body()));
  ASSERT_EQ(frames.size(), 6u);  // role, Hello, world, finish, usage, [DONE]
  EXPECT_EQ(frames[0].data["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(frames[0].data["object"], "chat.completion.chunk");
  EXPECT_TRUE(frames[0].data.contains("usage"));  // null on every chunk when include_usage
  std::string content;
  for (size_t i = 1; i < 3; ++i) content += frames[i].data["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(content, "Hello world");
  EXPECT_EQ(frames[3].data["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(frames[4].data["choices"].empty());
  EXPECT_EQ(frames[4].data["usage"]["completion_tokens"], 4);
  EXPECT_EQ(frames[4].data["usage"]["completion_tokens_details"]["reasoning_tokens"], 2);
  EXPECT_GT(frames[4].data["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(frames[4].data["usage"]["prompt_tokens_details"].contains("cached_tokens"));
  EXPECT_EQ(frames[4].data["timings"]["predicted_n"], 4);  // llama.cpp's names, read by the chat page
  EXPECT_TRUE(frames[4].data["timings"]["predicted_per_second"].is_number());
  EXPECT_TRUE(frames[4].data["timings"]["prompt_ms"].is_number());
  EXPECT_TRUE(frames[5].data.is_null());  // [DONE]
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(frames[i].data["id"], frames[0].data["id"]);
}

TEST_F(ServerTest, ChatStreamGoldenReasoningAndToolCall) {
  engine->push(reasoning_then_call());
  OJson body = chat_body();
  body["tools"] = kTools;
  std::string raw;
  auto frames = stream(call("/v1/chat/completions", body), &raw);
  EXPECT_EQ(raw.find("<tool_call>"), std::string::npos) << "markup leaked: " << raw;
  std::string reasoning;
  std::vector<OJson> tool_deltas;
  std::string finish;
  for (const auto& f : frames) {
    if (f.data.is_null() || f.data["choices"].empty()) continue;
    const OJson& d = f.data["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls")) tool_deltas.push_back(d["tool_calls"][0]);
    EXPECT_FALSE(d.contains("content") && !d["content"].get<std::string>().empty()) << f.raw;
    if (!f.data["choices"][0]["finish_reason"].is_null()) finish = f.data["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me look.");
  ASSERT_EQ(tool_deltas.size(), 2u);
  // The header fragment: index, id, type, name (pi and strict clients need them together).
  EXPECT_EQ(tool_deltas[0]["index"], 0);
  EXPECT_TRUE(tool_deltas[0]["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(tool_deltas[0]["type"], "function");
  EXPECT_EQ(tool_deltas[0]["function"]["name"], "read");
  EXPECT_EQ(tool_deltas[1]["index"], 0);
  EXPECT_FALSE(tool_deltas[1].contains("id"));
  OJson args = OJson::parse(tool_deltas[1]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(args, OJson::parse(R"({"path":"/etc/hosts","limit":10})"));  // typed from the schema
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(ServerTest, ChatParallelToolCallsGetDistinctIndices) {
  engine->push(Script{{"</think>", "<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>",
                       "\n<tool_call>\n<function=read>\n<parameter=path>\nb\n</parameter>\n</function>\n</tool_call>"}});
  OJson body = chat_body(false);
  body["tools"] = kTools;
  auto r = call("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  OJson j = json(r);
  const OJson& calls = j["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  EXPECT_EQ(calls[1]["function"]["arguments"], R"({"path":"b"})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
}

TEST_F(ServerTest, ChatNonStreamShape) {
  engine->push(Script{{"</think>", "Hi", " there"}});
  auto r = call("/v1/chat/completions", chat_body(false));
  ASSERT_EQ(r.status, 200) << r.body;
  OJson j = json(r);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 3);
}

TEST_F(ServerTest, ChatLogprobs) {
  engine->push(Script{{"</think>", "A", "B"}});
  OJson body = chat_body(false);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  auto r = call("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine->last_request().top_logprobs, 2);
  OJson lp = json(r)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_EQ(lp[1]["top_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(lp[1]["logprob"].get<float>(), -0.25f);
  EXPECT_TRUE(lp[1]["bytes"].is_array());
}

TEST_F(ServerTest, ChatLengthAndErrorStillFinish) {
  engine->push(Script{{"</think>", "a", "b", "c", "d"}});
  OJson body = chat_body();
  body["max_tokens"] = 3;
  auto frames = stream(call("/v1/chat/completions", body));
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[frames.size() - 3].data["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(frames.back().data.is_null());

  engine->push(Script{{"</think>", "partial"}, runtime::FinishReason::error, "", "out of memory"});
  frames = stream(call("/v1/chat/completions", chat_body()));
  bool finish_seen = false, error_seen = false;
  for (const auto& f : frames) {
    if (f.data.is_object() && !f.data.value("choices", OJson::array()).empty() &&
        !f.data["choices"][0]["finish_reason"].is_null())
      finish_seen = true;
    if (f.data.is_object() && f.data.contains("error")) error_seen = f.data["error"]["message"].get<std::string>().find("out of memory") != std::string::npos;
  }
  EXPECT_TRUE(finish_seen);
  EXPECT_TRUE(error_seen);
  EXPECT_TRUE(frames.back().data.is_null());
}

TEST_F(ServerTest, ChatStopSequenceIsStop) {
  engine->push(Script{{"</think>", "one", " two"}, runtime::FinishReason::stop, "END"});
  OJson body = chat_body(false);
  body["stop"] = "END";
  auto r = call("/v1/chat/completions", body);
  EXPECT_EQ(json(r)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(engine->last_request().stop_strings, Strings{"END"});
}

TEST_F(ServerTest, ClientDisconnectCancelsGeneration) {
  Script slow{{"</think>", "a", "b", "c", "d", "e", "f"}};
  slow.delay = std::chrono::milliseconds(20);
  engine->push(slow);
  auto r = call("/v1/chat/completions", chat_body());
  StringSink sink(/*fail_after=*/2);
  r.stream(sink);
  EXPECT_EQ(engine->cancelled(), 1);
  EXPECT_EQ(engine->live(), 0);  // the generation was released
  EXPECT_EQ(service->metrics().client_disconnects.load(), 1);
}

TEST_F(ServerTest, KeepAliveDuringLongPrefill) {
  Script slow{{"</think>", "x"}};
  slow.first_delay = std::chrono::milliseconds(200);  // keepalive is 50 ms in the fixture
  engine->push(slow);
  std::string raw;
  stream(call("/v1/chat/completions", chat_body()), &raw);
  EXPECT_NE(raw.find(": keep-alive"), std::string::npos);

  engine->push(slow);
  OJson body = {{"model", "kapitsa-test"}, {"max_tokens", 10}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto frames = stream(call("/v1/messages", body));
  int pings = 0;
  for (const auto& f : frames) pings += f.event == "ping";
  EXPECT_GE(pings, 3);  // one after message_start, then keep-alives
}

TEST_F(ServerTest, AnthropicStreamGolden) {
  engine->push(Script{{"Plan", " it.", "</think>\n\n", "Reading", " now.", "\n\n<tool_call>\n<function=read>\n",
                       "<parameter=path>\n/a\n</parameter>\n</function>\n</tool_call>"}});
  OJson body = {{"model", "kapitsa-test"},
                {"max_tokens", 32000},
                {"stream", true},
                {"tools", {{{"name", "read"}, {"description", "Read"}, {"input_schema", kTools[0]["function"]["parameters"]}}}},
                {"messages", {{{"role", "user"}, {"content", "read /a"}}}}};
  auto frames = stream(call("/v1/messages?beta=true", body));
  Strings expected = {"message_start", "ping",
                      "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
                      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                      "content_block_start", "content_block_delta", "content_block_stop",
                      "message_delta", "message_stop"};
  ASSERT_EQ(event_types(frames), expected);
  for (const auto& f : frames) EXPECT_EQ(f.data["type"], f.event);
  const OJson& start = frames[0].data["message"];
  EXPECT_GT(start["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_EQ(start["stop_reason"], nullptr);
  EXPECT_EQ(frames[2].data["content_block"]["type"], "thinking");
  EXPECT_EQ(frames[3].data["delta"]["type"], "thinking_delta");
  EXPECT_EQ(frames[5].data["delta"]["type"], "signature_delta");
  EXPECT_EQ(frames[7].data["content_block"]["type"], "text");
  EXPECT_EQ(frames[7].data["index"], 1);
  EXPECT_EQ(frames[8].data["delta"]["text"], "Reading");
  EXPECT_EQ(frames[11].data["content_block"]["type"], "tool_use");
  EXPECT_EQ(frames[11].data["content_block"]["input"], OJson::object());  // Claude Code needs "input": {}
  EXPECT_EQ(frames[11].data["content_block"]["name"], "read");
  EXPECT_EQ(OJson::parse(frames[12].data["delta"]["partial_json"].get<std::string>()), OJson::parse(R"({"path":"/a"})"));
  EXPECT_EQ(frames[14].data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(frames[14].data["usage"]["output_tokens"], 7);
  // max_tokens 32000 is clamped to what the context leaves, not rejected.
  EXPECT_LT(engine->last_request().max_tokens, 4096);
}

TEST_F(ServerTest, AnthropicEndTurnAndMaxTokens) {
  engine->push(Script{{"</think>", "Hello"}});
  OJson body = {{"model", "kapitsa-test"}, {"max_tokens", 100}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto frames = stream(call("/v1/messages", body));
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames[frames.size() - 2].data["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(frames.back().event, "message_stop");

  engine->push(Script{{"</think>", "a", "b", "c"}});
  body["max_tokens"] = 2;
  body["stream"] = false;
  auto r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json(r)["stop_reason"], "max_tokens");
  EXPECT_EQ(json(r)["content"][0]["type"], "text");
}

TEST_F(ServerTest, AnthropicEmptyAnswerStillHasABlock) {
  engine->push(Script{{"</think>"}});
  OJson body = {{"model", "kapitsa-test"}, {"max_tokens", 100}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto types = event_types(stream(call("/v1/messages", body)));
  Strings expected = {"message_start", "ping", "content_block_start", "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(types, expected);
}

TEST_F(ServerTest, AnthropicNonStreamToolUse) {
  engine->push(reasoning_then_call());
  OJson body = {{"model", "kapitsa-test"},
                {"max_tokens", 1000},
                {"tools", {{{"name", "read"}, {"input_schema", kTools[0]["function"]["parameters"]}}}},
                {"messages", {{{"role", "user"}, {"content", "read"}}}}};
  auto r = call("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  OJson j = json(r);
  EXPECT_EQ(j["type"], "message");
  ASSERT_EQ(j["content"].size(), 2u);
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][1]["type"], "tool_use");
  EXPECT_EQ(j["content"][1]["input"]["limit"], 10);
  EXPECT_EQ(j["stop_reason"], "tool_use");
  EXPECT_EQ(j["usage"]["output_tokens"], 5);
}

OJson responses_body() {
  return {{"model", "kapitsa-test"}, {"stream", true}, {"input", {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "hi"}}}}}}}};
}

TEST_F(ServerTest, ResponsesStreamGoldenText) {
  engine->push(Script{{"Think", "ing", "</think>\n\n", "Hello", " there"}});
  auto frames = stream(call("/v1/responses", responses_body()));
  Strings expected = {"response.created", "response.in_progress",
                      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                      "response.output_item.done",
                      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                      "response.output_item.done", "response.completed"};
  ASSERT_EQ(event_types(frames), expected);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].data["type"], frames[i].event);
    EXPECT_EQ(frames[i].data["sequence_number"], i);
  }
  EXPECT_EQ(frames[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(frames[8].data["item"]["type"], "reasoning");
  EXPECT_EQ(frames[8].data["item"]["content"][0]["text"], "Thinking");
  EXPECT_EQ(frames[9].data["output_index"], 1);
  EXPECT_EQ(frames[15].data["item"]["type"], "message");
  EXPECT_EQ(frames[15].data["item"]["content"][0]["text"], "Hello there");  // authoritative for Codex
  const OJson& done = frames[16].data["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["usage"]["output_tokens"], 5);
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(done["usage"]["total_tokens"].get<int>(),
            done["usage"]["input_tokens"].get<int>() + done["usage"]["output_tokens"].get<int>());
}

TEST_F(ServerTest, ResponsesFunctionAndCustomToolCalls) {
  engine->push(Script{{"</think>", "<tool_call>\n<function=exec_command>\n<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>",
                       "\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>\n</function>\n</tool_call>"}});
  OJson body = responses_body();
  body["tools"] = OJson::parse(R"([
    {"type":"function","name":"exec_command","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}},
    {"type":"custom","name":"apply_patch","description":"Patch files","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},
    {"type":"web_search","external_web_access":false}])");
  auto frames = stream(call("/v1/responses", body));
  Strings expected = {"response.created", "response.in_progress",
                      "response.output_item.added", "response.function_call_arguments.delta",
                      "response.function_call_arguments.done", "response.output_item.done",
                      "response.output_item.added", "response.custom_tool_call_input.delta",
                      "response.custom_tool_call_input.done", "response.output_item.done", "response.completed"};
  ASSERT_EQ(event_types(frames), expected);
  const OJson& fc = frames[5].data["item"];
  EXPECT_EQ(fc["type"], "function_call");
  EXPECT_EQ(fc["name"], "exec_command");
  EXPECT_EQ(OJson::parse(fc["arguments"].get<std::string>()), OJson::parse(R"({"cmd":"ls"})"));
  EXPECT_TRUE(fc["call_id"].get<std::string>().starts_with("call_"));
  const OJson& ctc = frames[9].data["item"];
  EXPECT_EQ(ctc["type"], "custom_tool_call");  // not function_call: Codex aborts on that
  EXPECT_EQ(ctc["name"], "apply_patch");
  EXPECT_EQ(ctc["input"], "*** Begin Patch\n*** End Patch");
  EXPECT_EQ(frames[2].data["item"]["arguments"], "");
  EXPECT_EQ(frames[10].data["response"]["output"].size(), 2u);
}

TEST_F(ServerTest, ResponsesLengthCompletesAndErrorFails) {
  engine->push(Script{{"</think>", "a", "b", "c"}});
  OJson body = responses_body();
  body["max_output_tokens"] = 2;
  auto frames = stream(call("/v1/responses", body));
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().event, "response.completed");
  EXPECT_EQ(frames.back().data["response"]["status"], "incomplete");
  EXPECT_EQ(frames[frames.size() - 2].event, "response.output_item.done");

  engine->push(Script{{"</think>", "a"}, runtime::FinishReason::error, "", "device lost"});
  frames = stream(call("/v1/responses", responses_body()));
  EXPECT_EQ(frames[frames.size() - 2].event, "response.output_item.done");
  EXPECT_EQ(frames.back().event, "response.failed");
  EXPECT_NE(frames.back().data["response"]["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
}

TEST_F(ServerTest, ResponsesNonStream) {
  engine->push(Script{{"</think>", "Done."}});
  OJson body = responses_body();
  body["stream"] = false;
  auto r = call("/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  OJson j = json(r);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "Done.");
}

TEST_F(ServerTest, CompletionsRawPrompt) {
  engine->push(Script{{"def", " f():"}});
  OJson body = {{"model", "kapitsa-test"}, {"prompt", "import os\n"}, {"max_tokens", 8}, {"stream", true}};
  auto frames = stream(call("/v1/completions", body));
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].data["choices"][0]["text"], "def");
  EXPECT_EQ(frames[2].data["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(engine->last_prompt(), "import os\n");  // no chat template

  engine->push(Script{{"x"}});
  body["stream"] = false;
  auto r = call("/v1/completions", body);
  EXPECT_EQ(json(r)["choices"][0]["text"], "x");
  EXPECT_EQ(json(r)["object"], "text_completion");
}

TEST_F(ServerTest, ShutdownEndsRunningStreams) {
  Script slow{{"</think>", "a", "b", "c", "d", "e", "f", "g", "h"}};
  slow.delay = std::chrono::milliseconds(30);
  engine->push(slow);
  auto r = call("/v1/chat/completions", chat_body());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    service->shutdown();
  });
  StringSink sink;
  r.stream(sink);
  stopper.join();
  auto frames = parse_sse(sink.out);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[frames.size() - 3].data["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(frames.back().data.is_null());
  EXPECT_EQ(call("/v1/chat/completions", chat_body()).status, 503);
}

}  // namespace
}  // namespace kapitsa::server::testing
