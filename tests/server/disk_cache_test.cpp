// A restarted server resumes a conversation from the disk prefix cache (runtime/disk_cache.h): turn 1
// through a Service over the real demo model whose engine keeps snapshots in a folder; that service and
// engine are gone; turn 2 through a new one over the same folder reports the history as cached prompt
// tokens in usage and answers exactly as a server without the cache. And the same through two
// `kapitsa serve --cache-dir` processes, one after the other (curl as the client).
#include "server_fixture.h"

#include "models/fingerprint.h"
#include "models/model.h"
#include "runtime/engine.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kapitsa::server::testing {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<runtime::Engine> demo_engine(const std::string& cache_dir) {
  const std::string dir = data_path("../models/demo/target");
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

// A `kapitsa serve --port 0` process; its port read from the "listening on" line.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  explicit ServeProcess(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) return;
    pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(KAPITSA_BIN, argv.data());
      _exit(127);
    }
    close(out[1]);
    FILE* in = fdopen(out[0], "r");
    char line[512];
    while (in != nullptr && std::fgets(line, sizeof line, in) != nullptr) {
      const char* at = std::strstr(line, "listening on http://127.0.0.1:");
      if (at == nullptr) continue;
      port = std::atoi(at + std::strlen("listening on http://127.0.0.1:"));
      break;
    }
    if (in != nullptr) std::fclose(in);
  }
  ~ServeProcess() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  // curl's output for `path` with `options` (curl prints nothing when the server is not up).
  std::string curl(const std::string& options, const std::string& path) const {
    const std::string command = fmt::format("curl -s {} http://127.0.0.1:{}{}", options, port, path);
    std::string out;
    FILE* p = popen(command.c_str(), "r");
    if (p == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    return out;
  }
  bool ready() const {  // /health answers 200 once the model is loaded (503 before)
    for (int i = 0; i < 600; ++i) {
      if (curl("-o /dev/null -w '%{http_code}'", "/health") == "200") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
};

TEST(DiskCacheServer, KapitsaServeCacheDirSurvivesARestart) {
  if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no curl to talk to the server";
  const fs::path scratch = fs::temp_directory_path() / ("kapitsa-serve-cache-e2e-" + std::to_string(getpid()));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  const std::vector<std::string> args = {"kapitsa", "serve", "--port", "0", "--model", data_path("../models/demo/target"),
                                         "--ctx", "4096", "--parallel", "2", "--cache-dir", (scratch / "cache").string(),
                                         "--cache-dir-size", "1GiB", "--alias", "kapitsa-test"};
  OJson messages = OJson::array({{{"role", "user"}, {"content", "Name three rivers of France."}}});
  auto post = [&](const ServeProcess& server) {
    const fs::path body = scratch / "body.json";
    std::ofstream(body) << OJson{{"model", "kapitsa-test"}, {"messages", messages}, {"max_tokens", 12}, {"temperature", 0}}.dump();
    const std::string out = server.curl(
        fmt::format("-H 'content-type: application/json' -H 'x-session-affinity: c1' --data-binary @{}", body.string()),
        "/v1/chat/completions");
    return OJson::parse(out, nullptr, false);
  };
  {
    ServeProcess first(args);
    ASSERT_GT(first.port, 0) << "no 'listening on' line";
    ASSERT_TRUE(first.ready());
    const OJson a1 = post(first);
    ASSERT_TRUE(a1.contains("choices")) << a1.dump();
    messages.push_back({{"role", "assistant"}, {"content", a1["choices"][0]["message"]["content"]}});
  }
  EXPECT_FALSE(fs::is_empty(scratch / "cache"));
  messages.push_back({{"role", "user"}, {"content", "And of Italy?"}});
  {
    ServeProcess second(args);
    ASSERT_GT(second.port, 0);
    ASSERT_TRUE(second.ready());
    const OJson a2 = post(second);
    ASSERT_TRUE(a2.contains("usage")) << a2.dump();
    EXPECT_GT(a2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << a2.dump();
  }  // the server has exited (it may still have been writing an entry of the preloaded next turn)
  std::error_code ignored;
  fs::remove_all(scratch, ignored);
}

}  // namespace
}  // namespace kapitsa::server::testing
