// Test fixture for the server: a Service over a FakeEngine with the real demo tokenizer and a real
// chat template (Qwen3.5 by default), helpers to call endpoints through HttpServer::route and to
// split an SSE body into (event, JSON) frames.
#pragma once

#include "fake_engine.h"
#include "server/transport.h"
#include "text/chat/chat_template.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace kapitsa::server::testing {

inline std::string data_path(const std::string& rel) { return std::string(KAPITSA_TEST_DATA) + "/" + rel; }

inline std::shared_ptr<const text::Tokenizer> demo_tokenizer() {
  static std::shared_ptr<const text::Tokenizer> tok = [] {
    auto t = text::Tokenizer::load(data_path("../models/demo/target"));
    if (!t.ok()) throw std::runtime_error(t.error().message);
    return std::make_shared<const text::Tokenizer>(std::move(*t));
  }();
  return tok;
}

// The model of the server tests that run a real engine (recorded agent sessions, the soak, next-turn
// prefill counts, the disk cache): the demo draft — trained, the target's tokenizer and hybrid layout
// (DeltaNet + attention) at a tenth of its compute — so these long sessions take seconds, not minutes,
// under the sanitizers. What they check (prefill counts, cache hits, forced replies, no leaks) does
// not depend on the model's quality; the target itself is served end to end by the agent tests.
inline std::string server_test_model_dir() { return data_path("../models/demo/draft"); }

inline std::shared_ptr<const text::ChatTemplate> load_template(const std::string& name) {
  auto t = text::ChatTemplate::from_file(data_path("text/data/templates/" + name));
  if (!t.ok()) throw std::runtime_error(t.error().message);
  return std::make_shared<const text::ChatTemplate>(std::move(*t));
}

struct SseFrame {
  std::string event;
  std::string raw;
  OJson data;  // null for [DONE]
};

// Collects streamed bytes; can pretend the client hangs up after `fail_after` writes.
class StringSink : public StreamSink {
 public:
  explicit StringSink(int fail_after = -1) : fail_after_(fail_after) {}
  bool write(std::string_view d) override {
    if (fail_after_ >= 0 && writes_ >= fail_after_) return false;
    ++writes_;
    out.append(d);
    return true;
  }
  std::string out;

 private:
  int fail_after_;
  int writes_ = 0;
};

inline std::vector<SseFrame> parse_sse(const std::string& body) {
  std::vector<SseFrame> frames;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    if (block.empty() || block[0] == ':') continue;  // comments (keep-alive)
    SseFrame f;
    size_t line_start = 0;
    while (line_start < block.size()) {
      size_t nl = block.find('\n', line_start);
      if (nl == std::string::npos) nl = block.size();
      std::string line = block.substr(line_start, nl - line_start);
      if (line.starts_with("event: ")) f.event = line.substr(7);
      if (line.starts_with("data: ")) f.raw = line.substr(6);
      line_start = nl + 1;
    }
    f.data = f.raw == "[DONE]" ? OJson(nullptr) : OJson::parse(f.raw, nullptr, false);
    frames.push_back(std::move(f));
  }
  return frames;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { make("qwen3.5.jinja"); }

  void make(const std::string& template_name, int64_t context = 4096, ServiceOptions opts = {}) {
    opts.model_ids = {"kapitsa-test", "alias-b"};
    opts.keepalive = std::chrono::milliseconds(50);
    service = std::make_unique<Service>(opts);
    engine = std::make_shared<FakeEngine>(demo_tokenizer(), context);
    service->set_model(engine, load_template(template_name));
    TransportOptions t;
    t.log_requests = false;
    transport = std::make_unique<HttpServer>(*service, t);
  }

  HttpResponse call(const std::string& path, const OJson& body, std::map<std::string, std::string> headers = {}) {
    return call_raw(path, body.dump(), std::move(headers));
  }
  HttpResponse call_raw(const std::string& path, std::string body, std::map<std::string, std::string> headers = {},
                        std::string method = "POST") {
    HttpRequest r;
    r.method = std::move(method);
    r.path = path.substr(0, path.find('?'));  // the transport sees the path without its query
    r.body = std::move(body);
    for (auto& [k, v] : headers) r.set_header(k, v);
    return transport->route(r);
  }
  // Runs a streamed response to the end; the frames it wrote.
  std::vector<SseFrame> stream(HttpResponse r, std::string* raw = nullptr) {
    EXPECT_TRUE(static_cast<bool>(r.stream)) << r.status << " " << r.body;
    if (!r.stream) return {};
    EXPECT_EQ(r.content_type, "text/event-stream");
    StringSink sink;
    r.stream(sink);
    if (raw) *raw = sink.out;
    return parse_sse(sink.out);
  }
  static std::vector<std::string> event_types(const std::vector<SseFrame>& frames) {
    std::vector<std::string> out;
    for (const auto& f : frames) out.push_back(f.event.empty() ? (f.data.is_null() ? "[DONE]" : "data") : f.event);
    return out;
  }
  static OJson json(const HttpResponse& r) { return OJson::parse(r.body, nullptr, false); }

  std::unique_ptr<Service> service;
  std::shared_ptr<FakeEngine> engine;
  std::unique_ptr<HttpServer> transport;
};

}  // namespace kapitsa::server::testing
