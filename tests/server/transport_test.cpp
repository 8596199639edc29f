// The HTTP transport over real loopback sockets: SSE streaming with chunked encoding, the body size
// limit (413 in JSON), a client hanging up mid-stream cancelling its generation, and a load test —
// 50 concurrent streaming clients over the three streaming APIs, a third of them disconnecting
// mid-stream: the server stays up, every completed stream is well-formed, every generation is released;
// clients too slow to send a request are dropped, long replies are not.
#include "server_fixture.h"
#include "socket_client.h"

#include <atomic>
#include <thread>

namespace kapitsa::server::testing {
namespace {

class LiveServer : public ServerTest {
 protected:
  void start(TransportOptions t = {}) {
    t.port = 0;
    t.log_requests = false;
    http = std::make_unique<HttpServer>(*service, t);
    std::string err;
    ASSERT_TRUE(http->bind(err)) << err;
    thread = std::thread([this] { http->run(); });
    for (int i = 0; i < 200; ++i) {  // wait until it accepts
      Socket s(http->port());
      if (s.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void TearDown() override {
    if (http) {
      http->stop();
      thread.join();
    }
  }
  bool wait_for(const std::function<bool()>& cond, int ms = 3000) {
    for (int i = 0; i < ms / 5; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return cond();
  }
  std::unique_ptr<HttpServer> http;
  std::thread thread;
};

const std::string kChat =
    R"({"model":"kapitsa-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]})";
const std::string kResponses = R"({"model":"kapitsa-test","stream":true,"input":"hi"})";
const std::string kMessages = R"({"model":"kapitsa-test","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]})";

TEST_F(LiveServer, StreamsOverHttp) {
  start();
  Socket s(http->port());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.send_all(http_post("/v1/chat/completions", kChat)));
  std::string resp = s.read_until("\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(resp), 200) << resp;
  EXPECT_NE(resp.find("Content-Type: text/event-stream"), std::string::npos) << resp;
  auto frames = parse_sse(dechunk(resp));
  ASSERT_GE(frames.size(), 3u);
  EXPECT_TRUE(frames.back().data.is_null());  // [DONE]

  // ?beta=true and Anthropic headers are accepted.
  Socket a(http->port());
  ASSERT_TRUE(a.send_all(http_post("/v1/messages?beta=true", kMessages, "anthropic-version: 2023-06-01\r\n")));
  std::string r2 = a.read_until("\r\n0\r\n\r\n");
  EXPECT_EQ(parse_sse(dechunk(r2)).back().event, "message_stop");
}

TEST_F(LiveServer, OversizedBodyIs413) {
  TransportOptions t;
  t.max_body_bytes = 1024;
  start(t);
  Socket s(http->port());
  std::string big = R"({"model":"kapitsa-test","messages":[{"role":"user","content":")" + std::string(4000, 'a') + R"("}]})";
  ASSERT_TRUE(s.send_all(http_post("/v1/chat/completions", big)));
  std::string resp = s.read_until("\r\n\r\n");
  resp = s.read_until("}}", resp);
  EXPECT_EQ(status_of(resp), 413) << resp;
  OJson j = OJson::parse(dechunk(resp), nullptr, false);
  EXPECT_EQ(j["error"]["code"], "request_too_large") << resp;
  EXPECT_TRUE(engine->requests().empty());
}

// A client that sends its request a byte at a time is dropped once the request timeout passes, and
// so is one that connects and sends nothing; a fast client on the same server is served meanwhile.
TEST_F(LiveServer, SlowClientsAreDropped) {
  TransportOptions t;
  t.request_timeout = std::chrono::milliseconds(1500);
  start(t);
  Socket idle(http->port());
  Socket slow(http->port());
  ASSERT_TRUE(idle.ok() && slow.ok());
  const std::string request = http_post("/v1/chat/completions", kChat);
  const auto t0 = std::chrono::steady_clock::now();
  bool cut = false;
  size_t sent = 0;
  while (sent < request.size() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8)) {
    if (!slow.send_all(request.substr(sent, 1))) {
      cut = true;
      break;
    }
    ++sent;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The server shut the connection: either a send failed or the read sees the end (no response).
  const std::string answer = slow.read_until("\r\n\r\n");
  EXPECT_TRUE(cut || answer.empty()) << "sent " << sent << " bytes; got " << answer;
  EXPECT_LT(sent, request.size()) << "the whole request went through at 10 bytes a second";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 6.0);
  EXPECT_EQ(idle.read_until("\r\n\r\n"), "");  // dropped too (or closed by keep-alive idling): no answer

  Socket fast(http->port());
  ASSERT_TRUE(fast.send_all(request));
  EXPECT_EQ(status_of(fast.read_until("\r\n0\r\n\r\n")), 200);
  EXPECT_TRUE(engine->requests().size() == 1u);
}

// A reply that streams for longer than the request timeout is not cut: the clock runs only while the
// server waits for a request.
TEST_F(LiveServer, LongRepliesOutliveTheRequestTimeout) {
  Script slow;
  for (int i = 0; i < 30; ++i) slow.tokens.push_back("tok ");
  slow.delay = std::chrono::milliseconds(100);  // 3 s of streaming
  engine->push(slow);
  TransportOptions t;
  t.request_timeout = std::chrono::milliseconds(1000);
  start(t);
  Socket s(http->port());
  ASSERT_TRUE(s.send_all(http_post("/v1/chat/completions", kChat)));
  const std::string resp = s.read_until("\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(resp), 200) << resp;
  auto frames = parse_sse(dechunk(resp));
  ASSERT_FALSE(frames.empty()) << resp;
  EXPECT_TRUE(frames.back().data.is_null()) << "the stream was cut before [DONE]";
}

TEST_F(LiveServer, DisconnectCancelsGeneration) {
  Script slow;
  for (int i = 0; i < 200; ++i) slow.tokens.push_back("tok ");
  slow.delay = std::chrono::milliseconds(10);
  engine->push(slow);
  start();
  {
    Socket s(http->port());
    ASSERT_TRUE(s.send_all(http_post("/v1/chat/completions", kChat)));
    std::string first = s.read_until("role");
    ASSERT_NE(first.find("role"), std::string::npos) << first;
  }  // hang up mid-stream
  EXPECT_TRUE(wait_for([&] { return engine->cancelled() == 1 && engine->live() == 0; }))
      << "cancelled " << engine->cancelled() << " live " << engine->live();
}

TEST_F(LiveServer, FiftyConcurrentStreamsAThirdDisconnecting) {
  Script s;
  for (int i = 0; i < 30; ++i) s.tokens.push_back(i == 0 ? "</think>" : "word ");
  s.delay = std::chrono::milliseconds(3);
  s.first_delay = std::chrono::milliseconds(20);
  engine->set_default(s);
  start();
  constexpr int kClients = 50;
  std::atomic<int> well_formed{0}, dropped{0}, malformed{0};
  std::vector<std::string> problems(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const int api = i % 3;
      const bool disconnect = (i % 3) == (i / 3) % 3;  // a third of the clients, spread over the APIs
      const char* path = api == 0 ? "/v1/chat/completions" : api == 1 ? "/v1/responses" : "/v1/messages";
      const std::string& body = api == 0 ? kChat : api == 1 ? kResponses : kMessages;
      Socket sock(http->port());
      if (!sock.ok() || !sock.send_all(http_post(path, body))) {
        problems[i] = "connect/send failed";
        malformed++;
        return;
      }
      if (disconnect) {
        sock.read_until("data: ");
        sock.close();
        dropped++;
        return;
      }
      std::string resp = sock.read_until("\r\n0\r\n\r\n");
      auto frames = parse_sse(dechunk(resp));
      bool ok = status_of(resp) == 200 && !frames.empty();
      if (ok && api == 0) {
        bool finish = false;
        for (const auto& f : frames)
          if (f.data.is_object() && !f.data["choices"].empty() && !f.data["choices"][0]["finish_reason"].is_null()) finish = true;
        ok = finish && frames.back().data.is_null();
      }
      if (ok && api == 1) ok = frames.back().event == "response.completed";
      if (ok && api == 2) ok = frames.back().event == "message_stop";
      if (ok) {
        well_formed++;
      } else {
        problems[i] = resp.substr(0, 400);
        malformed++;
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_TRUE(problems[i].empty()) << "client " << i << ": " << problems[i];
  EXPECT_EQ(malformed.load(), 0);
  EXPECT_EQ(well_formed.load() + dropped.load(), kClients);
  EXPECT_GE(dropped.load(), kClients / 3 - 1);
  EXPECT_TRUE(wait_for([&] { return engine->live() == 0; }, 5000)) << "live generations " << engine->live();
  EXPECT_GE(engine->cancelled(), 1);
  // Still serving.
  Socket h(http->port());
  ASSERT_TRUE(h.send_all("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(status_of(h.read_until("}")), 200);
}

}  // namespace
}  // namespace kapitsa::server::testing

namespace kapitsa::server::testing {
namespace {

// Issue 16: a second server on a port in use fails to bind (no SO_REUSEPORT sharing), and says who
// holds the port.
TEST_F(LiveServer, BusyPortIsAnErrorNamingItsHolder) {
  start();
  TransportOptions t;
  t.port = http->port();
  t.log_requests = false;
  HttpServer second(*service, t);
  std::string err;
  EXPECT_FALSE(second.bind(err));
  EXPECT_NE(err.find("port " + std::to_string(http->port()) + " is in use by"), std::string::npos) << err;
  EXPECT_NE(err.find("pid " + std::to_string(::getpid())), std::string::npos) << err;
}

}  // namespace
}  // namespace kapitsa::server::testing
