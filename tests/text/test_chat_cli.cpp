// `kapitsa template` end to end: for every golden template × conversation, the CLI prints exactly
// the golden prompt (no added newline) or exits non-zero with the template's message. Skipped
// when the kapitsa binary has not been built.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;
const std::string kDir = std::string(KAPITSA_TEST_DATA) + "/text/data/templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command; returns its exit status and stdout.
int run(const std::string& command, std::string& out) {
  out.clear();
  FILE* p = popen(command.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ChatCli, TemplateCommandPrintsGoldenPromptsExactly) {
  if (!fs::exists(KAPITSA_BIN)) GTEST_SKIP() << "kapitsa binary not built: " << KAPITSA_BIN;
  unsigned seed = std::random_device{}();
  fs::path dir = fs::temp_directory_path() / ("kapitsa_template_cli_" + std::to_string(seed));
  fs::create_directories(dir);
  std::printf("scratch dir (seed %u): %s\n", seed, dir.c_str());

  std::map<std::string, OrderedJson> conversations;
  for (const auto& c : OrderedJson::parse(read_file(kDir + "conversations.json"))) conversations[c["name"]] = c;
  OrderedJson golden = OrderedJson::parse(read_file(kDir + "golden.json"));
  int checked = 0;
  for (auto it = golden["templates"].begin(); it != golden["templates"].end(); ++it) {
    for (const auto& expected : it.value()) {
      const std::string conv = expected["conversation"];
      SCOPED_TRACE(it.key() + " × " + conv);
      fs::path conv_path = dir / (conv + ".json");
      std::ofstream(conv_path, std::ios::binary) << conversations[conv].dump();
      std::string out;
      int code = run(std::string(KAPITSA_BIN) + " template --template '" + kDir + it.key() + ".jinja' --conversation '" +
                         conv_path.string() + "' 2>/dev/null",
                     out);
      if (expected.contains("rendered")) {
        EXPECT_EQ(code, 0);
        EXPECT_EQ(out, expected["rendered"].get<std::string>());
      } else {
        EXPECT_NE(code, 0);
        EXPECT_EQ(out, "");
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 60);

  // The error message reaches stderr.
  fs::path bad = dir / "bad.jinja";
  std::ofstream(bad, std::ios::binary) << "{{ raise_exception('refused: ' ~ messages|length) }}";
  std::string out;
  int code = run(std::string(KAPITSA_BIN) + " template --template '" + bad.string() + "' --conversation '" +
                     (dir / "single-user.json").string() + "' 2>&1",
                 out);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("refused: 1"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
