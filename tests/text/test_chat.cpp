// Chat rendering around the template: OpenAI-style input normalisation (tool-call arguments as
// JSON strings, text parts), loading a template from a model folder (chat_template.jinja or
// tokenizer_config.json, with its special tokens), and errors for malformed conversations.
#include "text/chat/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace kapitsa::text {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(KAPITSA_TEST_DATA) + "/text/data/templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

OrderedJson conversation(const std::string& name) {
  for (const auto& c : OrderedJson::parse(read_file(kDir + "conversations.json")))
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no conversation " << name;
  return {};
}

std::string golden(const std::string& tmpl, const std::string& conv) {
  OrderedJson g = OrderedJson::parse(read_file(kDir + "golden.json"));
  for (const auto& e : g["templates"][tmpl])
    if (e["conversation"] == conv) return e.value("rendered", "");
  ADD_FAILURE() << "no golden " << tmpl << " × " << conv;
  return {};
}

// A fresh scratch folder per test (seeded name, printed for debugging).
fs::path scratch_dir() {
  std::random_device rd;
  unsigned seed = rd();
  fs::path dir = fs::temp_directory_path() / ("kapitsa_chat_test_" + std::to_string(seed));
  std::printf("scratch dir (seed %u): %s\n", seed, dir.c_str());
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(Chat, ToolCallArgumentsGivenAsJsonStringsRenderLikeObjects) {
  for (const std::string tmpl : {"qwen3", "qwen3.5", "qwen3-coder", "nemotron3-nano", "nemotron-nano-v2"}) {
    SCOPED_TRACE(tmpl);
    auto t = ChatTemplate::from_file(kDir + tmpl + ".jinja");
    ASSERT_TRUE(t.ok()) << t.error().message;
    OrderedJson conv = conversation("tool-args-nested");
    for (auto& m : conv["messages"])
      if (m.contains("tool_calls"))
        for (auto& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
    ASSERT_TRUE(conv["messages"][1]["tool_calls"][0]["function"]["arguments"].is_string());
    auto request = chat_request_from_json(conv, "test");
    ASSERT_TRUE(request.ok());
    auto out = t->render(*request);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(*out, golden(tmpl, "tool-args-nested"));
  }
}

TEST(Chat, ArgumentsThatAreNotAJsonObjectStayText) {
  auto t = ChatTemplate::from_file(kDir + "qwen3.jinja");
  ASSERT_TRUE(t.ok());
  ChatRequest r;
  r.messages = OrderedJson::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": "{not json"}}]}])");
  r.add_generation_prompt = false;
  auto out = t->render(r);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_NE(out->find("\"arguments\": {not json}"), std::string::npos) << *out;
}

TEST(Chat, FlattenTextPartsMakesStringTemplatesAcceptParts) {
  auto t = ChatTemplate::from_file(kDir + "qwen3.jinja");
  ASSERT_TRUE(t.ok());
  auto request = chat_request_from_json(conversation("content-parts"), "test");
  ASSERT_TRUE(request.ok());
  EXPECT_FALSE(t->render(*request).ok());  // as transformers: qwen3 calls .startswith on the list
  ChatOptions options;
  options.flatten_text_parts = true;
  auto out = t->render(*request, options);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, "<|im_start|>user\nPart one. Part two.<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Chat, ModelFolderTemplateAndSpecialTokens) {
  fs::path dir = scratch_dir();
  OrderedJson config = {{"bos_token", "<s>"},
                        {"eos_token", {{"content", "</s>"}, {"lstrip", false}}},
                        {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}};
  write_file(dir / "tokenizer_config.json", config.dump());
  ChatRequest r;
  r.messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  auto t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t->render(r), "<s>hi</s>");

  r.kwargs = {{"bos_token", "[B]"}};  // request kwargs override the tokenizer's variables
  EXPECT_EQ(*t->render(r), "[B]hi</s>");
  r.kwargs = OrderedJson::object();

  config["chat_template"] = OrderedJson::parse(R"([{"name": "tool_use", "template": "T"},
                                                   {"name": "default", "template": "D{{ messages|length }}"}])");
  write_file(dir / "tokenizer_config.json", config.dump());
  t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t->render(r), "D1");

  write_file(dir / "chat_template.jinja", "J{{ messages[0].role }}\n");  // the file wins; trailing newline dropped
  t = ChatTemplate::from_model_dir(dir.string());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t->render(r), "Juser");
  fs::remove_all(dir);
}

TEST(Chat, RealModelFolderRendersTheGoldens) {
  // The Qwen3 tokenizer folder carries its template in tokenizer_config.json.
  auto t = ChatTemplate::from_model_dir(std::string(KAPITSA_TEST_DATA) + "/text/data/qwen3");
  ASSERT_TRUE(t.ok()) << t.error().message;
  for (const char* conv : {"single-user", "tools-one-call", "reasoning-after-last-query", "unicode-and-quotes"}) {
    auto request = chat_request_from_json(conversation(conv), conv);
    ASSERT_TRUE(request.ok());
    auto out = t->render(*request);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(*out, golden("qwen3", conv)) << conv;
  }
}

TEST(Chat, MissingOrBrokenInputsAreErrorsNamingTheProblem) {
  auto missing = ChatTemplate::from_model_dir("/nonexistent/model/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("chat_template"), std::string::npos) << missing.error().message;

  auto broken = ChatTemplate::from_source("{% for x in %}", "broken.jinja");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("broken.jinja:1:"), std::string::npos) << broken.error().message;

  EXPECT_FALSE(chat_request_from_json(OrderedJson::parse(R"({"messages": 3})"), "c").ok());
  EXPECT_FALSE(chat_request_from_json(OrderedJson::parse(R"({"messages": [], "tools": {}})"), "c").ok());
  EXPECT_FALSE(chat_request_from_json(OrderedJson::parse(R"([1])"), "c").ok());

  auto t = ChatTemplate::from_file(kDir + "qwen3.5.jinja");
  ASSERT_TRUE(t.ok());
  ChatRequest r;
  r.messages = OrderedJson::parse(R"([{"content": "no role"}])");
  auto out = t->render(r);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("messages[0].role"), std::string::npos) << out.error().message;

  r.messages = OrderedJson::array();  // the template itself refuses: raise_exception's message comes through
  out = t->render(r);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("No messages provided."), std::string::npos) << out.error().message;
}

TEST(Chat, EnableThinkingKwargReachesTheTemplate) {
  auto t = ChatTemplate::from_file(kDir + "nemotron3-nano.jinja");
  ASSERT_TRUE(t.ok());
  ChatRequest r;
  r.messages = OrderedJson::parse(R"([{"role": "user", "content": "q"}])");
  auto on = t->render(r);
  r.kwargs = {{"enable_thinking", false}};
  auto off = t->render(r);
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_TRUE(on->ends_with("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(off->ends_with("<|im_start|>assistant\n<think></think>"));
}

}  // namespace
}  // namespace kapitsa::text
