// `kapitsa serve --cache-dir` survives a restart: two server processes, one after the other, over the
// same cache folder (curl as the client); the second reports the first conversation's history as
// cached prompt tokens. Runs the kapitsa executable (a *_cli.cpp test: not in the sanitizer pass).
#include "server_fixture.h"

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
