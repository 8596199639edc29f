// libFuzzer target: every POST endpoint's request handling — JSON parsing, field validation,
// conversation normalisation, chat-template rendering, tool/constraint setup, generation (a scripted
// FakeEngine, tests/server/fake_engine.h: reasoning, text and a tool call) and the response or SSE stream.
// The first input byte picks the endpoint and the chat template; the rest is the body. A malformed
// request must be answered 4xx with an error body; a 5xx or a crash is a finding.
#include "fuzz_common.h"
#include "server/fake_engine.h"
#include "server/transport.h"
#include "text/chat/chat_template.h"

#include <cstdio>
#include <cstdlib>

namespace {

using namespace kapitsa;

std::shared_ptr<const text::Tokenizer> demo_tokenizer() {
  static const auto tok = [] {
    auto t = text::Tokenizer::load(fuzz::data_path("../models/demo/target"));
    if (!t.ok()) std::abort();
    return std::make_shared<const text::Tokenizer>(std::move(t).value());
  }();
  return tok;
}

std::shared_ptr<const text::ChatTemplate> chat_template(int which) {
  static const auto templates = [] {
    std::vector<std::shared_ptr<const text::ChatTemplate>> all;
    for (const char* name : {"qwen3.5.jinja", "nemotron3-nano.jinja", "qwen3-coder.jinja"}) {
      auto t = text::ChatTemplate::from_file(fuzz::data_path(std::string("text/data/templates/") + name));
      if (!t.ok()) std::abort();
      all.push_back(std::make_shared<const text::ChatTemplate>(std::move(t).value()));
    }
    return all;
  }();
  return templates[static_cast<size_t>(which) % templates.size()];
}

class DiscardSink : public server::StreamSink {
 public:
  bool write(std::string_view data) override {
    bytes += data.size();
    return true;
  }
  size_t bytes = 0;
};

constexpr const char* kPaths[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                                  "/v1/messages/count_tokens"};

}  // namespace

// Loads the data before fuzzing starts: a first load under the sanitizers takes seconds, which would
// count against the first input's timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)demo_tokenizer(); chat_template(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  server::ServiceOptions options;
  options.model_ids = {"kapitsa"};
  options.keepalive = std::chrono::milliseconds(1000);
  server::Service service(options);
  auto engine = std::make_shared<server::testing::FakeEngine>(demo_tokenizer(), 2048);
  engine->set_default(server::testing::Script(
      {"<think>", "plan", "</think>", "Hello", " there", "<tool_call>", "\n<function=ls>", "\n<parameter=path>",
       "\n.", "\n</parameter>", "\n</function>", "\n</tool_call>"}));
  service.set_model(engine, chat_template(data[0] >> 4));
  server::TransportOptions transport_options;
  transport_options.log_requests = false;
  server::HttpServer transport(service, transport_options);

  server::HttpRequest request;
  request.path = kPaths[(data[0] & 15) % std::size(kPaths)];
  request.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  request.set_header("content-type", "application/json");
  server::HttpResponse response = transport.route(request);
  if (response.stream) {
    DiscardSink sink;
    response.stream(sink);
  }
  if (response.status >= 500) {
    std::fprintf(stderr, "%s answered %d: %s\n", request.path.c_str(), response.status, response.body.c_str());
    std::abort();
  }
  if (response.status >= 400 && response.body.find("error") == std::string::npos) std::abort();
  return 0;
}
