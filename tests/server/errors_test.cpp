// Negative tests: every error class answers with the right status and the API's own error shape
// (OpenAI {"error":{message,type,param,code}}, Anthropic {"type":"error","error":{type,message}}).
#include "server/api/api.h"
#include "server_fixture.h"

namespace kapitsa::server::testing {
namespace {

void expect_openai_error(const HttpResponse& r, int status, const std::string& code_or_type, const std::string& needle = "") {
  EXPECT_EQ(r.status, status) << r.body;
  OJson j = OJson::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  const bool matches = j["error"]["type"] == code_or_type || j["error"]["code"] == code_or_type;
  EXPECT_TRUE(matches) << r.body;
  if (!needle.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
}

void expect_anthropic_error(const HttpResponse& r, int status, const std::string& type, const std::string& needle = "") {
  EXPECT_EQ(r.status, status) << r.body;
  OJson j = OJson::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["type"], "error") << r.body;
  EXPECT_EQ(j["error"]["type"], type) << r.body;
  if (!needle.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
}

const OJson kUser = {{{"role", "user"}, {"content", "hi"}}};

TEST_F(ServerTest, MalformedJson) {
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/responses"}) {
    expect_openai_error(call_raw(path, "{\"model\": "), 400, "invalid_request_error", "not valid JSON");
    expect_openai_error(call_raw(path, "[1,2]"), 400, "invalid_request_error", "JSON object");
    expect_openai_error(call_raw(path, ""), 400, "invalid_request_error");
  }
  expect_anthropic_error(call_raw("/v1/messages", "{oops"), 400, "invalid_request_error", "not valid JSON");
  expect_anthropic_error(call_raw("/v1/messages/count_tokens", "nope"), 400, "invalid_request_error");
  EXPECT_TRUE(engine->requests().empty());
}

TEST_F(ServerTest, UnknownAndMissingModel) {
  expect_openai_error(call("/v1/chat/completions", {{"model", "gpt-9"}, {"messages", kUser}}), 404, "model_not_found", "gpt-9");
  expect_openai_error(call("/v1/responses", {{"model", "gpt-9"}, {"input", "hi"}}), 404, "model_not_found");
  expect_anthropic_error(call("/v1/messages", {{"model", "claude-x"}, {"max_tokens", 5}, {"messages", kUser}}), 404,
                         "not_found_error", "claude-x");
  expect_openai_error(call("/v1/chat/completions", {{"messages", kUser}}), 400, "invalid_request_error", "model");
  expect_openai_error(call_raw("/v1/models/gpt-9", "", {}, "GET"), 404, "model_not_found");
  // An alias is served.
  EXPECT_EQ(call("/v1/chat/completions", {{"model", "alias-b"}, {"messages", kUser}}).status, 200);
}

TEST_F(ServerTest, MissingAndMistypedFields) {
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}}), 400, "invalid_request_error", "messages");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", "hi"}}), 400, "invalid_request_error");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", OJson::array()}}), 400,
                      "invalid_request_error", "empty");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
                      400, "invalid_request_error", "role");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"temperature", "hot"}}), 400,
                      "invalid_request_error", "temperature");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_tokens", "many"}}), 400,
                      "invalid_request_error", "max_tokens");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"n", 3}}), 400,
                      "invalid_request_error", "n other than 1");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"tools", {{{"type", "function"}}}}}),
                      400, "invalid_request_error", "tools[0]");
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"top_logprobs", 50}}), 400,
                      "invalid_request_error", "top_logprobs");
  expect_openai_error(call("/v1/completions", {{"model", "kapitsa-test"}}), 400, "invalid_request_error", "prompt");
  expect_openai_error(call("/v1/responses", {{"model", "kapitsa-test"}}), 400, "invalid_request_error", "input");
  expect_openai_error(call("/v1/responses", {{"model", "kapitsa-test"}, {"input", "x"}, {"previous_response_id", "resp_1"}}), 400,
                      "invalid_request_error", "previous_response_id");
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"}, {"messages", kUser}}), 400, "invalid_request_error",
                         "max_tokens");
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"}, {"max_tokens", 10}}), 400, "invalid_request_error",
                         "messages");
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"}, {"max_tokens", 10}, {"messages", {{{"role", "bot"}, {"content", "x"}}}}}),
                         400, "invalid_request_error", "role");
  EXPECT_TRUE(engine->requests().empty());
}

TEST_F(ServerTest, TemplateRejectionIsAClearError) {
  // Qwen3.5 needs a user query; a conversation of only an assistant turn is refused by the template.
  auto r = call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", {{{"role", "assistant"}, {"content", "x"}}}}});
  expect_openai_error(r, 400, "invalid_request_error", "No user query");
}

TEST_F(ServerTest, PromptLongerThanContext) {
  make("qwen3.5.jinja", /*context=*/64);
  std::string big;
  for (int i = 0; i < 200; ++i) big += "word ";
  OJson msgs = {{{"role", "user"}, {"content", big}}};
  auto r = call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", msgs}});
  expect_openai_error(r, 400, "context_length_exceeded", "exceeds the available context size");
  auto a = call("/v1/messages", {{"model", "kapitsa-test"}, {"max_tokens", 10}, {"messages", msgs}});
  expect_anthropic_error(a, 400, "invalid_request_error", "prompt is too long");
  expect_openai_error(call("/v1/responses", {{"model", "kapitsa-test"}, {"input", big}}), 400, "context_length_exceeded");
  expect_openai_error(call("/v1/completions", {{"model", "kapitsa-test"}, {"prompt", big}}), 400, "context_length_exceeded");
  EXPECT_TRUE(engine->requests().empty());  // never silently truncated
  // count_tokens still answers for a prompt that does not fit (clients use it to decide to compact).
  auto c = call("/v1/messages/count_tokens", {{"model", "kapitsa-test"}, {"messages", msgs}});
  EXPECT_EQ(c.status, 200) << c.body;
  EXPECT_GT(json(c)["input_tokens"].get<int>(), 64);
}

// What each error kind answers on each API: the HTTP status, OpenAI's error.type and error.code, and
// Anthropic's error.type. The table is the contract with clients (their SDKs branch on these).
struct KindAnswer {
  ErrorKind kind;
  int status;
  const char* openai_type;
  const char* openai_code;  // nullptr: JSON null
  const char* anthropic_type;
};
const KindAnswer kKindAnswers[] = {
    {ErrorKind::invalid_argument, 400, "invalid_request_error", nullptr, "invalid_request_error"},
    {ErrorKind::context_too_long, 400, "invalid_request_error", "context_length_exceeded", "invalid_request_error"},
    {ErrorKind::not_found, 404, "not_found_error", "not_found", "not_found_error"},
    {ErrorKind::unauthenticated, 401, "authentication_error", "invalid_api_key", "authentication_error"},
    {ErrorKind::too_large, 413, "invalid_request_error", "request_too_large", "request_too_large"},
    {ErrorKind::unavailable, 503, "unavailable_error", "model_loading", "overloaded_error"},
    {ErrorKind::internal, 500, "server_error", nullptr, "api_error"},
};

void expect_kind_answer(const HttpResponse& r, const KindAnswer& k, bool anthropic, const std::string& message) {
  EXPECT_EQ(r.status, k.status) << r.body;
  OJson j = OJson::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  if (anthropic) {
    EXPECT_EQ(j["type"], "error") << r.body;
    EXPECT_EQ(j["error"]["type"], k.anthropic_type) << r.body;
  } else {
    EXPECT_EQ(j["error"]["type"], k.openai_type) << r.body;
    EXPECT_EQ(j["error"]["code"], k.openai_code ? OJson(k.openai_code) : OJson(nullptr)) << r.body;
    EXPECT_TRUE(j["error"].contains("param")) << r.body;
  }
  EXPECT_EQ(j["error"]["message"], message) << r.body;
}

TEST_F(ServerTest, EveryErrorKindMapsToItsStatusAndBody) {
  for (const KindAnswer& k : kKindAnswers) {
    SCOPED_TRACE(k.status);
    const ApiError e{k.kind, "what went wrong"};
    EXPECT_EQ(e.status(), k.status);
    expect_kind_answer(api::openai_error(e), k, false, "what went wrong");
    expect_kind_answer(api::anthropic_error(e), k, true, "what went wrong");
  }
}

// The engine's Error reaches the client with the kind it was made with, on every API surface, whatever
// its message says (no message text is matched: these messages name no context and no size).
TEST_F(ServerTest, EngineErrorKindsReachEveryApi) {
  const OJson chat = {{"model", "kapitsa-test"}, {"messages", kUser}};
  const OJson chat_stream = {{"model", "kapitsa-test"}, {"messages", kUser}, {"stream", true}};
  const OJson responses = {{"model", "kapitsa-test"}, {"input", "hi"}};
  const OJson completions = {{"model", "kapitsa-test"}, {"prompt", "hi"}};
  const OJson messages = {{"model", "kapitsa-test"}, {"max_tokens", 5}, {"messages", kUser}};
  const OJson messages_stream = {{"model", "kapitsa-test"}, {"max_tokens", 5}, {"messages", kUser}, {"stream", true}};
  struct Surface {
    const char* path;
    const OJson* body;
    bool anthropic;
  };
  const Surface surfaces[] = {{"/v1/chat/completions", &chat, false},  {"/v1/chat/completions", &chat_stream, false},
                              {"/v1/responses", &responses, false},    {"/v1/completions", &completions, false},
                              {"/v1/messages", &messages, true},       {"/v1/messages", &messages_stream, true}};
  for (const KindAnswer& k : kKindAnswers) {
    for (const Surface& s : surfaces) {
      SCOPED_TRACE(std::string(s.path) + " " + s.body->dump() + " status " + std::to_string(k.status));
      engine->fail_next_submit(error(k.kind, "engine refused request {}", 7));
      expect_kind_answer(call(s.path, *s.body), k, s.anthropic, "engine refused request 7");
    }
  }
  EXPECT_TRUE(engine->requests().empty());
}

TEST_F(ServerTest, ApiKey) {
  TransportOptions t;
  t.api_key = "s3cret";
  t.log_requests = false;
  transport = std::make_unique<HttpServer>(*service, t);
  OJson body = {{"model", "kapitsa-test"}, {"messages", kUser}};
  expect_openai_error(call("/v1/chat/completions", body), 401, "authentication_error");
  expect_openai_error(call("/v1/chat/completions", body, {{"Authorization", "Bearer wrong"}}), 401, "authentication_error");
  expect_anthropic_error(call("/v1/messages", body), 401, "authentication_error");
  EXPECT_EQ(call("/v1/chat/completions", body, {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(call("/v1/chat/completions", body, {{"x-api-key", "s3cret"}}).status, 200);
  EXPECT_EQ(call_raw("/health", "", {}, "GET").status, 200);  // health stays open
  EXPECT_EQ(call_raw("/", "", {}, "HEAD").status, 200);       // Claude Code's probe carries no auth
  // The chat page is open too (it asks for the key and sends it itself), and only as files of its own.
  HttpResponse page = call_raw("/", "", {}, "GET");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<script type=\"module\" src=\"/page/app.js\">"), std::string::npos);
  bool csp = false;
  for (const auto& [k, v] : page.headers) csp |= k == "Content-Security-Policy" && v.find("script-src 'self';") != std::string::npos;
  EXPECT_TRUE(csp) << "no inline script may run";
  for (const char* file : {"/page/app.js", "/page/markdown.js", "/page/style.css"})
    EXPECT_EQ(call_raw(file, "", {}, "GET").status, 200) << file;
  EXPECT_EQ(call_raw("/page/app.js", "", {}, "GET").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(call_raw("/page/../CMakeLists.txt", "", {}, "GET").status, 401);  // not a page file: the API's rules
}

TEST_F(ServerTest, UnknownPath) {
  expect_openai_error(call_raw("/v1/embeddings", "{}"), 404, "not_found_error");
  expect_anthropic_error(call_raw("/v1/messages/batches", "{}"), 404, "not_found_error");
  expect_openai_error(call_raw("/v1/chat/completions", "", {}, "GET"), 404, "not_found_error");
}

TEST_F(ServerTest, LoadingAnswers503) {
  service = std::make_unique<Service>(ServiceOptions{});
  TransportOptions t;
  t.log_requests = false;
  transport = std::make_unique<HttpServer>(*service, t);
  EXPECT_EQ(call_raw("/health", "", {}, "GET").status, 503);
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa"}, {"messages", kUser}}), 503, "model_loading");
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa"}, {"max_tokens", 1}, {"messages", kUser}}), 503, "overloaded_error");
  EXPECT_EQ(call_raw("/metrics", "", {}, "GET").status, 200);
}

TEST_F(ServerTest, ModelsHealthMetrics) {
  auto m = call_raw("/v1/models", "", {}, "GET");
  ASSERT_EQ(m.status, 200);
  OJson j = json(m);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["id"], "kapitsa-test");
  EXPECT_EQ(j["data"][0]["context_length"], 4096);
  EXPECT_EQ(j["data"][0]["meta"]["context_length"], 4096);
  EXPECT_EQ(json(call_raw("/v1/models/alias-b", "", {}, "GET"))["id"], "alias-b");
  auto h = call_raw("/health", "", {}, "GET");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(json(h)["status"], "ok");
  call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}});
  auto x = call_raw("/metrics", "", {}, "GET");
  EXPECT_EQ(x.status, 200);
  for (const char* name : {"kapitsa_completion_tokens_total 4", "kapitsa_prompt_tokens_total", "kapitsa_queue_depth",
                           "kapitsa_prefix_cache_reuse_ratio", "kapitsa_decode_tokens_per_second", "kapitsa_requests_total"})
    EXPECT_NE(x.body.find(name), std::string::npos) << name << "\n" << x.body;
}

}  // namespace
}  // namespace kapitsa::server::testing

namespace kapitsa::server::testing {
namespace {

// Issue 16: output budgets below 1 are refused on every endpoint (0 once meant "no limit").
TEST_F(ServerTest, OutputBudgetsBelowOneAreRefused) {
  for (int bad : {0, -5}) {
    expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_tokens", bad}}),
                        400, "invalid_request_error", "max_tokens must be at least 1");
    expect_openai_error(
        call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_completion_tokens", bad}}), 400,
        "invalid_request_error", "max_completion_tokens");
    expect_openai_error(call("/v1/completions", {{"model", "kapitsa-test"}, {"prompt", "hi"}, {"max_tokens", bad}}), 400,
                        "invalid_request_error", "max_tokens");
    expect_openai_error(call("/v1/responses", {{"model", "kapitsa-test"}, {"input", "hi"}, {"max_output_tokens", bad}}),
                        400, "invalid_request_error", "max_output_tokens");
    expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_tokens", bad}}), 400,
                           "invalid_request_error", "max_tokens");
  }
  EXPECT_TRUE(engine->requests().empty());
}

// A request without a budget gets the server's default (ServiceOptions::max_output_tokens), not the
// whole context.
TEST_F(ServerTest, NoBudgetMeansTheServersDefault) {
  ServiceOptions opts;
  opts.max_output_tokens = 77;
  make("qwen3.5.jinja", 4096, opts);
  ASSERT_EQ(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}}).status, 200);
  ASSERT_EQ(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}, {"max_tokens", 500}}).status, 200);
  ASSERT_EQ(engine->requests().size(), 2u);
  EXPECT_EQ(engine->requests()[0].max_tokens, 77);
  EXPECT_EQ(engine->requests()[1].max_tokens, 500);  // the request's own budget wins
}

// Images, audio and files are refused with a message naming the part: the models read text only.
TEST_F(ServerTest, NonTextContentPartsAreRefused) {
  const OJson image_url = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}};
  const OJson chat_msgs = {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "what is this?"}}, image_url}}}};
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", chat_msgs}}), 400,
                      "invalid_request_error", "messages[0].content[1] is a content part of type 'image_url'");
  const OJson audio_msgs = {{{"role", "user"}, {"content", {{{"type", "input_audio"}, {"input_audio", OJson::object()}}}}}};
  expect_openai_error(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", audio_msgs}}), 400,
                      "invalid_request_error", "input_audio");
  const OJson input = {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "data:,"}}}}}};
  expect_openai_error(call("/v1/responses", {{"model", "kapitsa-test"}, {"input", input}}), 400, "invalid_request_error",
                      "input[0].content[0] is a content part of type 'input_image'");
  const OJson image_block = {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}}}};
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"},
                                               {"max_tokens", 5},
                                               {"messages", {{{"role", "user"}, {"content", {image_block}}}}}}),
                         400, "invalid_request_error", "messages[0].content[0]");
  const OJson tool_result = {{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", {image_block}}};
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"},
                                               {"max_tokens", 5},
                                               {"messages", {{{"role", "user"}, {"content", {tool_result}}}}}}),
                         400, "invalid_request_error", "messages[0].content[0].content[0]");
  EXPECT_TRUE(engine->requests().empty());
}

}  // namespace
}  // namespace kapitsa::server::testing

namespace kapitsa::server::testing {
namespace {

// Issue 16: generations in flight are bounded (max_sequences + max_queued); one more is a 429 with
// Retry-After in each API's error shape, counted in /metrics; a slot freed admits the next.
TEST_F(ServerTest, FullQueueIsA429WithRetryAfter) {
  ServiceOptions opts;
  opts.max_queued = 0;
  make("qwen3.5.jinja", 4096, opts);
  const int slots = engine->options().max_sequences;
  const OJson chat = {{"model", "kapitsa-test"}, {"messages", kUser}, {"stream", true}};
  std::vector<HttpResponse> held;  // streamed answers not yet sent: their generations stay in flight
  for (int i = 0; i < slots; ++i) {
    held.push_back(call("/v1/chat/completions", chat));
    ASSERT_EQ(held.back().status, 200) << held.back().body;
  }
  const HttpResponse busy = call("/v1/chat/completions", chat);
  expect_openai_error(busy, 429, "rate_limit_exceeded", "the server is busy");
  const bool retry_after = std::any_of(busy.headers.begin(), busy.headers.end(),
                                       [](const auto& h) { return h.first == "Retry-After" && h.second == "1"; });
  EXPECT_TRUE(retry_after);
  expect_anthropic_error(call("/v1/messages", {{"model", "kapitsa-test"}, {"max_tokens", 5}, {"messages", kUser}}), 429,
                         "rate_limit_error");
  EXPECT_NE(call_raw("/metrics", "", {}, "GET").body.find("kapitsa_requests_rejected_overloaded_total 2"), std::string::npos);
  held.pop_back();  // one generation ends
  EXPECT_EQ(call("/v1/chat/completions", {{"model", "kapitsa-test"}, {"messages", kUser}}).status, 200);
}

}  // namespace
}  // namespace kapitsa::server::testing
