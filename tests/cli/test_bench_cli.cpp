// `kapitsa bench` end to end on the demo model with small sizes: every measurement is there with a
// positive rate, a context past the model's limit is reported as skipped, speculation gives the same
// output, the roofline is positive; the table names each row; --submit prints the JSON and sends
// exactly that only after "y" or --yes (a local cpp-httplib server records what arrives), nothing on
// "n" or no answer; no URL, an unreachable URL and a bad --model are clear errors.
#include "base/json.h"
#include "models/cli_runner.h"

#include <httplib.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

namespace kapitsa::testing {
namespace {

const std::string kSmall = "bench --prompt 24 --decode 6 --sequences 2 --seconds 0.05 --ttft 40,40000";
// The least a run can do, for the tests about --submit and errors (no bandwidth measurement).
const std::string kTiny = "bench --prompt 8 --decode 2 --sequences 1 --ttft 8 --no-spec --seconds 0";

// `input | env kapitsa args`: stdout only (the progress and the question go to stderr), or stdout and
// stderr together. The caller's $KAPITSA_BENCH_URL is never passed on.
CommandResult kapitsa_with(const std::string& args, const std::string& input, const std::string& env, bool with_stderr) {
  const std::string command = "printf '" + input + "' | env -u KAPITSA_BENCH_URL " + env + " " + std::string(KAPITSA_BIN) +
                              " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
CommandResult stdout_of(const std::string& args, const std::string& input, const std::string& env = "") {
  return kapitsa_with(args, input, env, false);
}
CommandResult output_of(const std::string& args, const std::string& env = "") { return kapitsa_with(args, "", env, true); }

TEST(BenchCli, JsonHasEveryMeasurement) {
  const CommandResult r = stdout_of(kSmall + " --json", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto parsed = parse_json_lenient(r.output, "bench --json");
  ASSERT_TRUE(parsed.ok()) << r.output;
  const Json& j = *parsed;
  const Json& res = j["results"];
  EXPECT_EQ(res["prefill"]["tokens"], 24);
  EXPECT_GT(res["prefill"]["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(res["decode"]["tokens_per_s"].get<double>(), 0);
  ASSERT_EQ(res["ttft"].size(), 2u);
  EXPECT_GT(res["ttft"][0]["seconds"].get<double>(), 0);
  EXPECT_NE(res["ttft"][1]["skipped"].get<std::string>().find("32768-token context"), std::string::npos) << res.dump();
  EXPECT_EQ(res["aggregate_decode"]["sequences"], 2);
  EXPECT_GT(res["aggregate_decode"]["tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(res["speculation"]["same_output"].get<bool>()) << res.dump();
  EXPECT_LE(res["speculation"]["accepted"].get<int>(), res["speculation"]["proposed"].get<int>());
  EXPECT_GT(j["roofline"]["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["system"]["read_bandwidth_bytes_per_s"].get<double>(), 1e8);
  EXPECT_GT(j["model"]["weight_bytes_per_token"].get<double>(), 0);
  EXPECT_GT(j["system"]["cores"].get<int>(), 0);
  EXPECT_GT(j["system"]["memory_bytes"].get<double>(), 0);
  EXPECT_FALSE(j["system"]["cpu"].get<std::string>().empty());
  EXPECT_EQ(j["kapitsa_version"].get<std::string>().empty(), false);
}

TEST(BenchCli, TableNamesEachRow) {
  const CommandResult r = output_of(kSmall + " --no-spec");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"Model ", "System ", "Roofline", "prefill 24 tokens", "decode 6 tokens, batch 1", "time to first token at 40 tokens",
                        "skipped", "aggregate decode, 2 sequences"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_EQ(r.output.find("speculation"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kapitsa bench ["), std::string::npos) << "no progress lines\n" << r.output;
}

class Receiver {
 public:
  Receiver() {
    server_.Post("/submit", [this](const httplib::Request& q, httplib::Response& r) {
      std::lock_guard<std::mutex> lock(mutex_);
      bodies_.push_back(q.body);
      r.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/submit"; }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> bodies_;
};

TEST(BenchCli, SubmitSendsThePrintedJsonOnlyWithConsent) {
  Receiver receiver;
  const std::string base = kTiny + " --submit --submit-url " + receiver.url();
  const CommandResult no = stdout_of(base, "n\\n");
  EXPECT_EQ(no.exit_code, 0) << no.output;
  const CommandResult silent = stdout_of(base, "");
  EXPECT_EQ(silent.exit_code, 0) << silent.output;
  EXPECT_TRUE(receiver.bodies().empty());
  EXPECT_TRUE(parse_json_lenient(no.output, "printed").ok()) << no.output;  // it was shown all the same

  const CommandResult yes = stdout_of(base, "y\\n");
  ASSERT_EQ(yes.exit_code, 0) << yes.output;
  ASSERT_EQ(receiver.bodies().size(), 1u);
  EXPECT_EQ(receiver.bodies()[0] + "\n", yes.output);  // exactly what was printed

  const CommandResult scripted = stdout_of(base + " --yes", "");
  ASSERT_EQ(scripted.exit_code, 0) << scripted.output;
  ASSERT_EQ(receiver.bodies().size(), 2u);
  EXPECT_EQ(receiver.bodies()[1] + "\n", scripted.output);

  // The URL from $KAPITSA_BENCH_URL.
  const CommandResult from_env = stdout_of(kTiny + " --submit --yes", "", "KAPITSA_BENCH_URL=" + receiver.url());
  ASSERT_EQ(from_env.exit_code, 0) << from_env.output;
  ASSERT_EQ(receiver.bodies().size(), 3u);
  EXPECT_EQ(receiver.bodies()[2] + "\n", from_env.output);
}

TEST(BenchCli, SubmitWithoutAUrlSaysSoBeforeRunning) {
  const CommandResult r = output_of("bench --submit");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--submit needs somewhere to send"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("prefill"), std::string::npos) << "ran the suite first\n" << r.output;
}

TEST(BenchCli, UnreachableUrlIsAClearError) {
  // A port that was free a moment ago and is closed now: the connection is refused at once.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  const int port = ntohs(address.sin_port);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/submit";
  const CommandResult r = output_of(kTiny + " --submit --yes --submit-url " + url);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("kapitsa bench: could not send to " + url), std::string::npos) << r.output;
}

TEST(BenchCli, BadModelIsAClearError) {
  const CommandResult missing = output_of(kTiny + " --model /no/such/model");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("--model /no/such/model: not a folder"), std::string::npos) << missing.output;

  ScratchDir cache;  // an alias whose model is not in this (empty) Hub cache
  const CommandResult absent = output_of(kTiny + " --model 4b", "HF_HUB_CACHE=" + cache.path() + " HF_HOME=" + cache.path());
  EXPECT_EQ(absent.exit_code, 1) << absent.output;
  EXPECT_NE(absent.output.find("is not downloaded"), std::string::npos) << absent.output;
  EXPECT_NE(absent.output.find("kapitsa pull 4b"), std::string::npos) << absent.output;
}

}  // namespace
}  // namespace kapitsa::testing
