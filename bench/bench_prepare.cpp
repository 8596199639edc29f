// Request preparation for a long agent session (Google Benchmark): a ~100k-token conversation (system
// prompt, tools, then turns of reasoning + a read_file call + its result, code from the tokenizer's
// golden corpus) gets one new turn (the reply and its tool result), and the server prepares the
// request: parse the JSON body, normalise the messages, render the template, encode.
//   before: what main did up to fe4a68a — the whole conversation rendered three times (with and
//           without the generation prompt, and with a marker reply) and encoded twice;
//   after:  render_chat_prompt now — one render, one-turn renders for the boundary and end of turn,
//           the ids of the previous request reused by a PromptEncoder (only the tail encoded).
// Each part is also timed alone. Template: Qwen3.5 (tests/text/data/templates); tokenizer: the demo
// model's. Run: build/release/bench/bench_prepare
#include "server/conversation.h"
#include "server/json_body.h"
#include "text/chat/chat_prompt.h"
#include "text/tokenizer/prompt_encoder.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace {

using namespace kapitsa;
using text::OrderedJson;

std::string source_dir() { return KAPITSA_SOURCE_DIR; }

template <typename T>
T or_exit(Expected<T> e) {
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.error().message.c_str());
    std::exit(1);
  }
  return std::move(e).value();
}

struct Session {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;
  std::string previous_body, body;  // the request before the new turn, and with it
  size_t tokens = 0;
};

OrderedJson request_body(const OrderedJson& messages) {
  const OrderedJson tools = OrderedJson::parse(R"([{"type": "function", "function": {"name": "read_file",
    "description": "Reads a file", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}}, "required": ["path"]}}}])");
  return {{"model", "m"}, {"messages", messages}, {"tools", tools}, {"stream", true}};
}

const Session& session() {
  static const Session s = [] {
    Session s;
    s.tokenizer = std::make_shared<const text::Tokenizer>(or_exit(text::Tokenizer::load(source_dir() + "/models/demo/target")));
    s.chat_template = std::make_unique<text::ChatTemplate>(
        or_exit(text::ChatTemplate::from_file(source_dir() + "/tests/text/data/templates/qwen3.5.jinja")));
    const Json golden = or_exit(read_json_file(source_dir() + "/tests/text/data/qwen3/golden.json"));
    OrderedJson messages = OrderedJson::array();
    messages.push_back({{"role", "system"}, {"content", "You are a coding agent. Use the tools."}});
    messages.push_back({{"role", "user"}, {"content", "Find and fix the bug."}});
    size_t chars = 0, i = 0;
    auto add_turn = [&](OrderedJson& m) {
      const std::string id = "call_" + std::to_string(i);
      std::string code;
      for (int k = 0; k < 4; ++k) code += golden[(i * 4 + k) % golden.size()]["text"].get<std::string>();
      m.push_back({{"role", "assistant"},
                   {"content", ""},
                   {"reasoning_content", "Let me read the next part of the file."},
                   {"tool_calls", {{{"id", id}, {"type", "function"},
                                    {"function", {{"name", "read_file"}, {"arguments", "{\"path\": \"src/a.py\", \"offset\": " + std::to_string(i) + "}"}}}}}}});
      m.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", code}});
      chars += code.size();
      ++i;
    };
    while (chars < 255000) add_turn(messages);  // ~100k tokens in all
    s.previous_body = request_body(messages).dump();
    add_turn(messages);
    s.body = request_body(messages).dump();
    return s;
  }();
  return s;
}

text::ChatRequest parse(const std::string& body) {
  OrderedJson j = *server::parse_json(body);  // as the server's parse_body
  auto messages = server::normalize_messages(std::move(j["messages"]));
  text::ChatRequest r;
  r.messages = std::move(std::get<OrderedJson>(messages));
  r.tools = std::get<server::NormalizedTools>(server::normalize_tools(j["tools"], "tools")).tools;
  return r;
}

// main's render_chat_prompt up to fe4a68a (three renders of the conversation, two full encodes).
text::ChatPrompt legacy_render(const text::ChatTemplate& t, const text::Tokenizer& tokenizer, text::ChatRequest request) {
  text::ChatPrompt p;
  request.add_generation_prompt = true;
  p.text = *t.render(request);
  p.ids = tokenizer.encode(p.text);
  request.add_generation_prompt = false;
  if (auto history = t.render(request); history.ok() && p.text.starts_with(*history)) {
    const std::vector<int32_t> ids = tokenizer.encode(*history);
    if (ids.size() <= p.ids.size() && std::equal(ids.begin(), ids.end(), p.ids.begin())) p.turn_boundary = ids.size();
  }
  static const std::string marker = "KAPITSA_REPLY_END_MARKER";
  request.messages.push_back({{"role", "assistant"}, {"content", marker}});
  if (auto closed = t.render(request); closed.ok())
    if (const size_t at = closed->rfind(marker); at != std::string::npos)
      p.end_of_turn_ids = tokenizer.encode(closed->substr(at + marker.size()));
  return p;
}

void BM_PrepareBefore(benchmark::State& state) {
  const Session& s = session();
  size_t n = 0;
  for (auto _ : state) n = legacy_render(*s.chat_template, *s.tokenizer, parse(s.body)).ids.size();
  state.counters["prompt_tokens"] = static_cast<double>(n);
}

void BM_PrepareAfter(benchmark::State& state) {
  const Session& s = session();
  size_t n = 0, reused = 0;
  for (auto _ : state) {
    state.PauseTiming();  // the previous request of the conversation, prepared earlier
    text::PromptEncoder encoder(s.tokenizer);
    encoder.encode(or_exit(text::render_chat_prompt(*s.chat_template, *s.tokenizer, parse(s.previous_body))).text);
    state.ResumeTiming();
    auto p = or_exit(text::render_chat_prompt(*s.chat_template, *s.tokenizer, parse(s.body), &encoder));
    n = p.ids.size();
  }
  {  // how much of the prompt came from the previous request
    text::PromptEncoder encoder(s.tokenizer);
    encoder.encode(or_exit(text::render_chat_prompt(*s.chat_template, *s.tokenizer, parse(s.previous_body))).text);
    reused = encoder.encode(*s.chat_template->render(parse(s.body))).reused_ids;
  }
  state.counters["prompt_tokens"] = static_cast<double>(n);
  state.counters["reused_tokens"] = static_cast<double>(reused);
}

// The parts alone.
void BM_ParseAndNormalize(benchmark::State& state) {
  const Session& s = session();
  for (auto _ : state) benchmark::DoNotOptimize(parse(s.body));
}

// The body parse alone: simdjson converted into ordered_json (the server's), and nlohmann's own parse.
void BM_ParseJson(benchmark::State& state) {
  const Session& s = session();
  for (auto _ : state) benchmark::DoNotOptimize(server::parse_json(s.body));
}

void BM_ParseJsonNlohmann(benchmark::State& state) {
  const Session& s = session();
  for (auto _ : state) benchmark::DoNotOptimize(OrderedJson::parse(s.body));
}

void BM_RenderOnce(benchmark::State& state) {
  const Session& s = session();
  const text::ChatRequest r = parse(s.body);
  for (auto _ : state) benchmark::DoNotOptimize(*s.chat_template->render(r));
}

void BM_EncodeWhole(benchmark::State& state) {
  const Session& s = session();
  const std::string text = *s.chat_template->render(parse(s.body));
  for (auto _ : state) benchmark::DoNotOptimize(s.tokenizer->encode(text));
}

void BM_EncodeTail(benchmark::State& state) {
  const Session& s = session();
  const std::string previous = *s.chat_template->render(parse(s.previous_body));
  const std::string text = *s.chat_template->render(parse(s.body));
  for (auto _ : state) {
    state.PauseTiming();
    text::PromptEncoder encoder(s.tokenizer);
    encoder.encode(previous);
    state.ResumeTiming();
    benchmark::DoNotOptimize(encoder.encode(text));
  }
}

BENCHMARK(BM_PrepareBefore)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrepareAfter)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseAndNormalize)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseJsonNlohmann)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RenderOnce)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeWhole)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeTail)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
