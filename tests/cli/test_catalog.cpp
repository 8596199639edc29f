// The model catalog and the --model resolver: the shipped catalog parses and names every quantization
// issue 15 lists; a user models.json (under a temporary XDG_CONFIG_HOME) adds and overrides aliases;
// aliases and Hub ids resolve to snapshots in a temporary Hub cache; folders and .gguf files pass
// through; an alias not downloaded names the `kapitsa pull` command; `kapitsa run` says the same; an
// entry Kapitsa cannot run yet says why and what it runs instead, and --pull downloads nothing for it.
#include "cli/catalog/catalog.h"
#include "models/cli_runner.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

namespace kapitsa::testing {
namespace {
namespace fs = std::filesystem;
using cli::catalog::Catalog;

// A scratch Hub cache, config home and KAPITSA_HOME (the repository, for models/catalog.json) for one test.
class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HF_HUB_CACHE", scratch_.path("hub").c_str(), 1);
    setenv("XDG_CONFIG_HOME", scratch_.path("config").c_str(), 1);
    setenv("KAPITSA_HOME", test_data_path("..").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("HF_HUB_CACHE");
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("KAPITSA_HOME");
  }
  // Puts a snapshot of `repo` at refs/main into the scratch cache, with config.json and `extra_file`.
  fs::path add_snapshot(const std::string& repo, const std::string& extra_file = "") {
    std::string folder = "models--" + repo;
    folder.replace(folder.find('/'), 1, "--");
    const fs::path root = fs::path(scratch_.path("hub")) / folder;
    fs::create_directories(root / "refs");
    std::ofstream(root / "refs" / "main") << "0123abcd";
    const fs::path snap = root / "snapshots" / "0123abcd";
    fs::create_directories(snap);
    std::ofstream(snap / "config.json") << "{}";
    if (!extra_file.empty()) std::ofstream(snap / extra_file) << "GGUF";
    return snap;
  }
  void write_user_file(const std::string& text) {
    fs::create_directories(scratch_.path("config/kapitsa"));
    std::ofstream(scratch_.path("config/kapitsa/models.json")) << text;
  }
  Catalog load() {
    auto c = cli::catalog::load_catalog();
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? std::move(c).value() : Catalog{};
  }
  ScratchDir scratch_;
};

TEST_F(CatalogTest, ShippedCatalogHasTheIssuesAliasesAndQuantizations) {
  const Catalog c = load();
  for (const char* alias : {"4b", "27b", "35b", "flash-next", "nemotron-30b"}) {
    const auto* m = c.find(alias);
    ASSERT_NE(m, nullptr) << alias;
    EXPECT_NE(m->quant(m->default_quant), nullptr) << alias;
    EXPECT_GT(m->params, 0) << alias;
    EXPECT_GT(m->max_context, 0) << alias;
    EXPECT_GT(m->shape.attention_layers, 0) << alias;
  }
  std::set<std::string> quants;
  for (const auto& m : c.models)
    for (const auto& q : m.quants) {
      quants.insert(q.name);
      EXPECT_GT(q.bits_per_weight, 1) << m.alias << ":" << q.name;
      EXPECT_NE(q.repo.find('/'), std::string::npos) << q.repo;
    }
  for (const char* q : {"4bit", "6bit", "8bit", "bf16", "nvfp4", "q4_k_m"}) EXPECT_TRUE(quants.count(q)) << q;
}

TEST_F(CatalogTest, AliasResolvesToItsCachedSnapshot) {
  const Catalog c = load();
  const std::string repo = c.find("27b")->quant("6bit")->repo;
  const fs::path snap = add_snapshot(repo);
  auto r = cli::catalog::resolve_model("27b:6bit", c);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fs::path(r.value()), snap);
  // The default quantization of 27b is another repository, not downloaded.
  if (c.find("27b")->default_quant != "6bit") {
    EXPECT_FALSE(cli::catalog::resolve_model("27b", c).ok());
  }
}

TEST_F(CatalogTest, HubIdResolvesAndAGgufQuantPicksItsFile) {
  const Catalog c = load();
  const fs::path snap = add_snapshot("someone/tiny-model");
  auto r = cli::catalog::resolve_model("someone/tiny-model", c);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fs::path(r.value()), snap);
  const auto* q = c.find("nemotron-30b")->quant("q4_k_m");
  ASSERT_NE(q, nullptr);
  ASSERT_FALSE(q->file.empty());
  const fs::path gguf_snap = add_snapshot(q->repo, q->file);
  auto g = cli::catalog::resolve_model("nemotron-30b:q4_k_m", c);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(fs::path(g.value()), gguf_snap / q->file);
}

TEST_F(CatalogTest, UserFileAddsAndOverridesAliases) {
  write_user_file(R"({"models": {
      "mine": {"name": "My model", "params": 1e9, "attention": {"layers": 1, "kv_heads": 1, "head_dim": 64},
               "quants": {"bf16": {"repo": "me/my-model"}}},
      "27b": {"default_quant": "8bit", "quants": {"8bit": {"repo": "me/27b-8bit-requant"}}}}})");
  const Catalog c = load();
  ASSERT_NE(c.find("mine"), nullptr);
  EXPECT_NE(c.find("35b"), nullptr);  // the shipped entries stay
  EXPECT_EQ(c.find("27b")->quant("8bit")->repo, "me/27b-8bit-requant");
  EXPECT_EQ(c.find("27b")->default_quant, "8bit");
  EXPECT_NE(c.find("27b")->quant("4bit"), nullptr);  // a merge patch: untouched quants remain
  const fs::path snap = add_snapshot("me/my-model");
  auto r = cli::catalog::resolve_model("mine", c);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fs::path(r.value()), snap);
}

TEST_F(CatalogTest, BrokenUserFileIsAnErrorNamingIt) {
  write_user_file("{ not json");
  auto c = cli::catalog::load_catalog();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("models.json"), std::string::npos) << c.error().message;
}

TEST_F(CatalogTest, NotDownloadedAliasNamesThePullCommand) {
  const Catalog c = load();
  auto r = cli::catalog::resolve_model("35b:8bit", c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("kapitsa pull 35b:8bit"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("not downloaded"), std::string::npos) << r.error().message;
}

TEST_F(CatalogTest, UnknownAliasAndUnknownQuantSayWhatIsKnown) {
  const Catalog c = load();
  auto r = cli::catalog::resolve_model("70b", c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("--model 70b"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("27b"), std::string::npos) << r.error().message;  // lists the known aliases
  EXPECT_NE(r.error().message.find("models.json"), std::string::npos) << r.error().message;
  auto q = cli::catalog::resolve_model("27b:3bit", c);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("3bit"), std::string::npos) << q.error().message;
  EXPECT_NE(q.error().message.find("4bit"), std::string::npos) << q.error().message;
}

TEST_F(CatalogTest, FoldersAndGgufFilesPassThrough) {
  const Catalog c = load();
  const std::string dir = test_data_path("../models/demo/target");
  auto r = cli::catalog::resolve_model(dir, c);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value(), dir);
  const std::string gguf = scratch_.path("model.gguf");
  std::ofstream(gguf) << "GGUF";
  auto g = cli::catalog::resolve_model(gguf, c);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g.value(), gguf);
  EXPECT_FALSE(cli::catalog::resolve_model(scratch_.path("missing.gguf"), c).ok());
  auto empty = cli::catalog::resolve_model(scratch_.path(), c);  // a folder without config.json
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("config.json"), std::string::npos) << empty.error().message;
}

TEST_F(CatalogTest, EntriesKapitsaCannotRunYetAreMarked) {
  const Catalog c = load();
  const auto why = [&](const char* alias, const char* quant) {
    const cli::catalog::ModelEntry* m = c.find(alias);
    const cli::catalog::QuantEntry* q = m == nullptr ? nullptr : m->quant(quant);
    return q == nullptr ? std::string("(no such entry)") : q->unsupported;
  };
  EXPECT_NE(why("nemotron-30b", "nvfp4").find("NVFP4"), std::string::npos);  // from the quantization's default
  const std::vector<std::pair<const char*, const char*>> runnable = {{"4b", "bf16"}, {"27b", "4bit"}, {"35b", "8bit"},
                                                                     {"nemotron-30b", "bf16"}, {"nemotron-30b", "q4_k_m"}};
  for (const auto& [alias, quant] : runnable) EXPECT_EQ(why(alias, quant), "") << alias << ":" << quant;
}

TEST_F(CatalogTest, NotDownloadedEntryKapitsaCannotRunSaysWhyNotHowToPull) {
  const Catalog c = load();
  auto r = cli::catalog::resolve_model("nemotron-30b:nvfp4", c);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("cannot run it yet: NVFP4"), std::string::npos) << m;
  EXPECT_NE(m.find("it runs nemotron-30b:bf16"), std::string::npos) << m;
  EXPECT_EQ(m.find("kapitsa pull"), std::string::npos) << m;
  // A user file can mark an entry too (here one the shipped catalog runs).
  write_user_file(R"({"models": {"4b": {"quants": {"bf16": {"unsupported": "marked by the test"}}}}})");
  auto marked = cli::catalog::resolve_model("4b:bf16", load());
  ASSERT_FALSE(marked.ok());
  EXPECT_NE(marked.error().message.find("marked by the test; it runs 4b:4bit, 4b:8bit"), std::string::npos)
      << marked.error().message;
}

// --pull refuses before downloading (HF_ENDPOINT points nowhere: a download would fail differently);
// kapitsa pull downloads all the same when asked by name, after a note.
TEST_F(CatalogTest, PullOfAnEntryKapitsaCannotRun) {
  setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
  const CommandResult run = run_kapitsa("run --pull --model nemotron-30b:nvfp4 --max-tokens 1 hello");
  const CommandResult pull = run_kapitsa("pull nemotron-30b:nvfp4 --retries 0");
  unsetenv("HF_ENDPOINT");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("cannot run it yet"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("downloading"), std::string::npos) << run.output;
  EXPECT_NE(pull.exit_code, 0);
  EXPECT_NE(pull.output.find("note: Kapitsa cannot run nemotron-30b:nvfp4 yet: NVFP4"), std::string::npos) << pull.output;
}

TEST_F(CatalogTest, RunWithAnAliasNotDownloadedPrintsThePullCommand) {
  const CommandResult r = run_kapitsa("run --model 35b --max-tokens 1 hello");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("kapitsa pull 35b"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kapitsa::testing
