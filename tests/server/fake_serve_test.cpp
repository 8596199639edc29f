// Not a test by itself: with KAPITSA_FAKE_SERVE=<file> set, serves the real HTTP stack over a
// FakeEngine that answers like a tool-using model (a tool call when tools are offered, a text answer
// once a tool result is in the prompt, apply_patch as a custom tool), writes its port to <file> and
// runs until stdin closes. tests/server_js drives it with the official OpenAI and Anthropic SDKs for
// the tool-call round trips a tiny demo model cannot be relied on to produce. Skipped otherwise.
#include "server_fixture.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

namespace kapitsa::server::testing {
namespace {

Script respond(const std::string& prompt) {
  const size_t last_user = prompt.rfind("<|im_start|>user");
  const bool has_result = last_user != std::string::npos && prompt.find("<tool_response>", last_user) != std::string::npos;
  Script s;
  s.tokens = {"The user ", "asks.", "\n</think>\n\n"};
  if (has_result) {
    s.tokens.insert(s.tokens.end(), {"The tool ", "answered: ", "done."});
  } else if (prompt.find("\"apply_patch\"") != std::string::npos) {
    s.tokens.insert(s.tokens.end(), {"<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n",
                                     "*** Add File: hello.txt\n+hi\n*** End Patch\n</parameter>\n</function>\n</tool_call>"});
  } else if (prompt.find("\"get_weather\"") != std::string::npos) {
    s.tokens.insert(s.tokens.end(), {"Checking.", "\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n",
                                     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"});
  } else {
    s.tokens.insert(s.tokens.end(), {"Hello ", "from ", "the ", "scripted ", "model."});
  }
  s.delay = std::chrono::milliseconds(2);
  return s;
}

TEST(FakeServe, Run) {
  const char* port_file = std::getenv("KAPITSA_FAKE_SERVE");
  if (!port_file) GTEST_SKIP() << "set KAPITSA_FAKE_SERVE=<file> to run the scripted server for tests/server_js";
  ServiceOptions so;
  so.model_ids = {"kapitsa-test"};
  Service service(so);
  auto engine = std::make_shared<FakeEngine>(demo_tokenizer(), 8192);
  engine->set_responder(respond);
  service.set_model(engine, load_template("qwen3.5.jinja"));
  TransportOptions t;
  t.port = 0;
  t.log_requests = false;
  HttpServer http(service, t);
  std::string err;
  ASSERT_TRUE(http.bind(err)) << err;
  std::thread server([&] { http.run(); });
  std::ofstream(port_file) << http.port() << "\n";
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  service.shutdown();
  http.stop();
  server.join();
}

}  // namespace
}  // namespace kapitsa::server::testing
