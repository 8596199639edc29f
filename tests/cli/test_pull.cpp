// `kapitsa pull` / `ls` / `rm` and `run --pull` against a Hub-shaped server started by the test
// (fake_hub.h) serving the demo model: the download lands in the Hub cache layout and runs like the
// folder it came from; a cut connection resumes with a Range request; an interrupted pull leaves nothing
// that loads and the next pull continues from its .incomplete part; a flipped byte fails the sha256 and is
// fetched again (twice: an error, nothing kept); 401/404/500 and a full disk (RLIMIT_FSIZE through
// `ulimit -f`: writes fail with EFBIG, the way a full disk fails them with ENOSPC) are clear errors;
// HF_TOKEN is sent; HF_HUB_OFFLINE never contacts the server.
#include "base/json.h"
#include "cli/fake_hub.h"
#include "models/cli_runner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kapitsa::testing {
namespace {
namespace fs = std::filesystem;

constexpr const char* kRepo = "kapitsa-test/demo";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<FakeHub::File> demo_files() {
  const fs::path dir = fs::path(KAPITSA_TEST_DATA) / ".." / "models" / "demo" / "target";
  std::vector<FakeHub::File> out;
  for (const char* name : {"config.json", "generation_config.json", "tokenizer_config.json"})
    out.push_back({name, read_file(dir / name), false});
  for (const char* name : {"tokenizer.json", "model.safetensors"}) out.push_back({name, read_file(dir / name), true});
  return out;
}

class Pull : public ::testing::Test {
 protected:
  void SetUp() override {
    hub_ = std::make_unique<FakeHub>(kRepo, demo_files());
    hub_->cut_bytes = 3 << 20;
  }
  void start() { hub_->start(); }

  // kapitsa with the Hub settings pointing at the fake server and a scratch cache; `pre` runs first in
  // the shell (ulimit), `env` adds variables.
  CommandResult kapitsa(const std::string& args, const std::string& env = "", const std::string& pre = "") {
    const std::string command = pre + " env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u HF_HUB_OFFLINE -u HF_HOME HF_HUB_CACHE=" +
                                cache() + " HF_ENDPOINT=" + hub_->endpoint() + " " + env + " " + KAPITSA_BIN + " " + args;
    CommandResult r;
    FILE* pipe = popen(("(" + command + ") 2>&1").c_str(), "r");
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }

  std::string cache() const { return scratch_.path("hub"); }
  fs::path repo_root() const { return fs::path(cache()) / "models--kapitsa-test--demo"; }
  fs::path snapshot() const { return repo_root() / "snapshots" / FakeHub::kCommit; }

  // Every file in the snapshot has the served bytes, through a symlink into blobs/ named by its hash.
  void expect_complete_snapshot() {
    EXPECT_EQ(read_file(repo_root() / "refs" / "main"), FakeHub::kCommit);
    for (const FakeHub::File& f : hub_->files()) {
      const fs::path link = snapshot() / f.path;
      ASSERT_TRUE(fs::is_symlink(link)) << link;
      EXPECT_EQ(fs::read_symlink(link), fs::path("../../blobs") / (f.lfs ? f.sha256() : f.blob_id())) << f.path;
      EXPECT_TRUE(read_file(link) == f.data) << f.path << " differs from what the server sent";
    }
    for (const auto& e : fs::directory_iterator(repo_root() / "blobs"))
      EXPECT_NE(e.path().extension(), ".incomplete") << e.path();
  }

  int incomplete_files() const {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(repo_root() / "blobs", ec)) n += e.path().extension() == ".incomplete";
    return n;
  }

  ScratchDir scratch_;
  std::unique_ptr<FakeHub> hub_;
};

TEST_F(Pull, DownloadsIntoTheHubCacheRunsListsAndRemoves) {
  start();
  const CommandResult pulled = kapitsa(std::string("pull ") + kRepo);
  ASSERT_EQ(pulled.exit_code, 0) << pulled.output;
  expect_complete_snapshot();
  EXPECT_NE(pulled.output.find("model.safetensors"), std::string::npos) << pulled.output;  // plain progress lines
  EXPECT_NE(pulled.output.find("MiB/s"), std::string::npos) << pulled.output;
  EXPECT_NE(pulled.output.find("ETA "), std::string::npos) << pulled.output;         // rate and ETA
  EXPECT_NE(pulled.output.find("(5/5 files)"), std::string::npos) << pulled.output;  // every file counted

  // The pulled model generates what the folder it was served from generates.
  const std::string demo = std::string(KAPITSA_TEST_DATA) + "/../models/demo/target";
  const std::string args = " --temperature 0 --max-tokens 8 --no-template --output json --quiet \"def fibonacci(n):\"";
  const CommandResult from_cache = kapitsa(std::string("run --model ") + kRepo + args);
  const CommandResult from_folder = kapitsa("run --model " + demo + args);
  ASSERT_EQ(from_cache.exit_code, 0) << from_cache.output;
  ASSERT_EQ(from_folder.exit_code, 0) << from_folder.output;
  EXPECT_EQ(from_cache.output, from_folder.output);  // the generated ids
  EXPECT_EQ(from_cache.output.front(), '[') << from_cache.output;

  // A second pull downloads nothing.
  const int requests = hub_->file_requests;
  ASSERT_EQ(kapitsa(std::string("pull --quiet ") + kRepo).exit_code, 0);
  EXPECT_EQ(hub_->file_requests, requests);

  const CommandResult ls = kapitsa("ls --json");
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  auto j = parse_json_lenient(ls.output, "ls --json");
  ASSERT_TRUE(j.ok()) << ls.output;
  ASSERT_EQ((*j)["models"].size(), 1u) << ls.output;
  int64_t bytes = 0;
  for (const FakeHub::File& f : hub_->files()) bytes += int64_t(f.data.size());
  EXPECT_EQ((*j)["models"][0]["repo"], kRepo);
  EXPECT_EQ((*j)["models"][0]["bytes"].get<int64_t>(), bytes);
  EXPECT_EQ((*j)["models"][0]["files"].get<int>(), int(hub_->files().size()));
  EXPECT_NE(kapitsa("ls").output.find(kRepo), std::string::npos);

  const CommandResult rm = kapitsa(std::string("rm ") + kRepo);
  ASSERT_EQ(rm.exit_code, 0) << rm.output;
  EXPECT_FALSE(fs::exists(repo_root()));
  EXPECT_NE(kapitsa(std::string("rm ") + kRepo).exit_code, 0);
}

TEST_F(Pull, LocalDirHoldsPlainFilesThatRun) {
  start();
  const std::string dir = scratch_.path("local");
  ASSERT_EQ(kapitsa(std::string("pull --local-dir ") + dir + " " + kRepo).exit_code, 0);
  for (const FakeHub::File& f : hub_->files()) EXPECT_TRUE(read_file(fs::path(dir) / f.path) == f.data) << f.path;
  EXPECT_FALSE(fs::exists(repo_root()));
  const CommandResult run = kapitsa("run --model " + dir + " --max-tokens 2 hi");
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST_F(Pull, ACutConnectionResumesWithARangeRequest) {
  start();
  hub_->cuts = 1;
  const CommandResult r = kapitsa(std::string("pull --jobs 1 ") + kRepo);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from byte"), std::string::npos) << r.output;
  const std::vector<std::string> ranges = hub_->ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], "bytes=" + std::to_string(int64_t(hub_->cut_bytes)) + "-");
  expect_complete_snapshot();
}

TEST_F(Pull, AnInterruptedPullIsNeverUsedAndTheNextOneResumes) {
  start();
  hub_->cuts = 1000;  // every response is cut: the pull gives up
  const CommandResult failed = kapitsa(std::string("pull --retries 1 --jobs 1 ") + kRepo);
  ASSERT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.output.find("the same command resumes"), std::string::npos) << failed.output;
  EXPECT_GE(incomplete_files(), 1);
  EXPECT_FALSE(fs::exists(repo_root() / "refs" / "main"));
  EXPECT_FALSE(fs::exists(snapshot()));
  const CommandResult run = kapitsa(std::string("run --model ") + kRepo + " hi");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("kapitsa pull " + std::string(kRepo)), std::string::npos) << run.output;

  hub_->cuts = 0;
  const size_t before = hub_->ranges().size();
  const CommandResult resumed = kapitsa(std::string("pull ") + kRepo);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<std::string> ranges = hub_->ranges();
  ASSERT_GT(ranges.size(), before);
  EXPECT_EQ(ranges[before], "bytes=" + std::to_string(2 * int64_t(hub_->cut_bytes)) + "-");  // two cut tries kept
  expect_complete_snapshot();
}

TEST_F(Pull, ACorruptByteIsDetectedAndDownloadedAgain) {
  start();
  hub_->corruptions = 1;
  const CommandResult r = kapitsa(std::string("pull --jobs 1 ") + kRepo);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("corrupt download (sha256"), std::string::npos) << r.output;
  expect_complete_snapshot();
}

TEST_F(Pull, CorruptTwiceIsAnErrorAndKeepsNothing) {
  start();
  hub_->corruptions = 1000;
  const CommandResult r = kapitsa(std::string("pull --jobs 1 ") + kRepo);
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("corrupt twice"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(snapshot()));
  EXPECT_EQ(incomplete_files(), 0);
  for (const FakeHub::File& f : hub_->files()) {
    if (f.lfs && f.path == hub_->faulty) EXPECT_FALSE(fs::exists(repo_root() / "blobs" / f.sha256())) << f.path;
  }
}

TEST_F(Pull, HttpErrorsAreClear) {
  start();
  struct Case {
    std::atomic<int>* knob;
    int status;
    const char* says;
  };
  for (const Case& c : {Case{&hub_->api_status, 401, "set HF_TOKEN"}, Case{&hub_->api_status, 404, "not found"},
                        Case{&hub_->file_status, 404, "not found"}, Case{&hub_->file_status, 500, "server error"}}) {
    *c.knob = c.status;
    const CommandResult r = kapitsa(std::string("pull ") + kRepo);
    *c.knob = 0;
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("HTTP " + std::to_string(c.status)), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(snapshot())) << r.output;
  }
  const CommandResult missing = kapitsa("pull kapitsa-test/nothing-here");
  EXPECT_NE(missing.output.find("HTTP 404"), std::string::npos) << missing.output;
  const CommandResult bad_alias = kapitsa("pull no-such-alias");
  EXPECT_EQ(bad_alias.exit_code, 2) << bad_alias.output;
  EXPECT_NE(bad_alias.output.find("known alias"), std::string::npos) << bad_alias.output;
}

TEST_F(Pull, HfTokenIsSentAsABearerToken) {
  hub_->required_token = "hf_secret";
  start();
  const CommandResult without = kapitsa(std::string("pull ") + kRepo);
  EXPECT_NE(without.output.find("HTTP 401"), std::string::npos) << without.output;
  const CommandResult wrong = kapitsa(std::string("pull ") + kRepo, "HF_TOKEN=hf_wrong");
  EXPECT_NE(wrong.output.find("HF_TOKEN was sent and refused"), std::string::npos) << wrong.output;
  const CommandResult with = kapitsa(std::string("pull ") + kRepo, "HF_TOKEN=hf_secret");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  expect_complete_snapshot();
}

TEST_F(Pull, AFullDiskIsAClearErrorAndThePullResumesAfterwards) {
  start();
  // ulimit -f: 4096 blocks of 512 bytes (dash and bash in POSIX mode) = 2 MiB per file, below the
  // demo's 21 MiB weights; write() then fails with EFBIG (the pull ignores SIGXFSZ).
  const CommandResult r = kapitsa(std::string("pull --jobs 1 ") + kRepo, "", "ulimit -f 4096;");
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the disk is full"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(snapshot()));
  EXPECT_GE(incomplete_files(), 1);

  const CommandResult resumed = kapitsa(std::string("pull ") + kRepo);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_FALSE(hub_->ranges().empty());  // continued from the part written before the limit
  expect_complete_snapshot();
}

TEST_F(Pull, OfflineNeverContactsTheServer) {
  start();
  const CommandResult offline = kapitsa(std::string("pull ") + kRepo, "HF_HUB_OFFLINE=1");
  EXPECT_NE(offline.exit_code, 0);
  EXPECT_NE(offline.output.find("HF_HUB_OFFLINE"), std::string::npos) << offline.output;
  EXPECT_EQ(hub_->file_requests, 0);
  ASSERT_EQ(kapitsa(std::string("pull --quiet ") + kRepo).exit_code, 0);
  const int requests = hub_->file_requests;
  hub_->api_status = 500;  // would fail if asked
  const CommandResult cached = kapitsa(std::string("pull ") + kRepo, "HF_HUB_OFFLINE=1");
  EXPECT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_NE(cached.output.find(snapshot().string()), std::string::npos) << cached.output;
  EXPECT_EQ(hub_->file_requests, requests);
}

TEST_F(Pull, RunSaysHowToPullAndPullsWithTheFlag) {
  start();
  const CommandResult missing = kapitsa(std::string("run --model ") + kRepo + " --max-tokens 2 hi");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("not downloaded"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("kapitsa pull " + std::string(kRepo)), std::string::npos) << missing.output;
  EXPECT_EQ(hub_->file_requests, 0);
  const CommandResult pulled = kapitsa(std::string("run --pull --model ") + kRepo + " --max-tokens 2 hi");
  EXPECT_EQ(pulled.exit_code, 0) << pulled.output;
  expect_complete_snapshot();
}

}  // namespace
}  // namespace kapitsa::testing
