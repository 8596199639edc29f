// A restarted server resumes a conversation from the disk prefix cache (runtime/disk_cache.h): turn 1
// through a Service over a real demo model (server_test_model_dir) whose engine keeps snapshots in a folder; that service and
// engine are gone; turn 2 through a new one over the same folder reports the history as cached prompt
// tokens in usage and answers exactly as a server without the cache. The same through two `kapitsa serve`
// processes: disk_cache_serve_cli.cpp.
#include "server_fixture.h"

#include "models/fingerprint.h"
#include "models/model.h"
#include "runtime/engine.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace kapitsa::server::testing {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<runtime::Engine> demo_engine(const std::string& cache_dir) {
  const std::string dir = server_test_model_dir();
  auto model = models::load_model(dir);
  if (!model.ok()) throw std::runtime_error(model.error().message);
  runtime::EngineOptions o;
  o.context_tokens = 4096;
  o.max_sequences = 2;
  if (!cache_dir.empty()) {
    o.disk_cache.dir = cache_dir;
    o.disk_cache.fingerprint = *models::model_fingerprint(dir);
  }
  auto e = runtime::Engine::create(std::move(model).value(), demo_tokenizer(), o);
  if (!e.ok()) throw std::runtime_error(e.error().message);
  return std::shared_ptr<runtime::Engine>(std::move(e).value());
}

// One chat completion (greedy, 12 tokens) through a fresh Service over `engine`.
OJson chat(const std::shared_ptr<runtime::Engine>& engine, const OJson& messages) {
  ServiceOptions opts;
  opts.model_ids = {"kapitsa-test"};
  Service service(opts);
  service.set_model(engine, load_template("qwen3.5.jinja"));
  HttpServer transport(service, TransportOptions{.log_requests = false});
  HttpRequest r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.body = OJson{{"model", "kapitsa-test"}, {"messages", messages}, {"max_tokens", 12}, {"temperature", 0}}.dump();
  r.set_header("x-session-affinity", "conversation-1");
  const HttpResponse response = transport.route(r);
  EXPECT_EQ(response.status, 200) << response.body;
  return OJson::parse(response.body, nullptr, false);
}

// Turn 1 on `engine`, then the server's preload of the history (folded when idle) reaches the cache.
// Returns the conversation with the reply and turn 2's user message.
OJson first_turn(const std::shared_ptr<runtime::Engine>& engine) {
  OJson messages = OJson::array({{{"role", "user"}, {"content", "Name three rivers of France."}}});
  const OJson a1 = chat(engine, messages);
  messages.push_back({{"role", "assistant"}, {"content", a1["choices"][0]["message"]["content"]}});
  for (int i = 0; i < 500 && engine->counters().end_of_turn_tokens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GT(engine->counters().end_of_turn_tokens, 0);
  messages.push_back({{"role", "user"}, {"content", "And of Italy?"}});
  return messages;
}

TEST(DiskCacheServer, RestartedServerResumesTurnTwo) {
  const fs::path cache = fs::temp_directory_path() / ("kapitsa-serve-cache-" + std::to_string(getpid()));
  fs::remove_all(cache);
  first_turn(demo_engine(cache.string()));  // that engine and its service are gone afterwards
  auto restarted = demo_engine(cache.string());
  auto warm = demo_engine("");  // a server that never stopped
  const OJson messages = first_turn(warm);
  const OJson resumed = chat(restarted, messages);
  const OJson continued = chat(warm, messages);
  const OJson cold = chat(demo_engine(""), messages);
  EXPECT_EQ(resumed["choices"][0]["message"], cold["choices"][0]["message"]);
  const int64_t cached = resumed["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  EXPECT_GT(cached, 0);
  EXPECT_EQ(cached, continued["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>())
      << "the restarted server should reuse what a server that never stopped reuses";
  EXPECT_EQ(restarted->counters().prompt_tokens_from_disk, cached);
  EXPECT_EQ(restarted->counters().prompt_tokens_prefilled, resumed["usage"]["prompt_tokens"].get<int64_t>() - cached);
  EXPECT_EQ(cold["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0);
  fs::remove_all(cache);
}

}  // namespace
}  // namespace kapitsa::server::testing
