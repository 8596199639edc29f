// `kapitsa tokenize` end to end (KAPITSA_BIN via popen): golden strings in, golden ids out; --decode
// back; bad input lines and a folder without tokenizer.json give clear errors and a non-zero exit.
#include "tokenizer_fixture.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace kapitsa::testing {
namespace {

struct CliRun {
  int exit_code = -1;
  std::vector<std::string> lines;
};

// Runs `kapitsa tokenize <args>` with `input` on stdin; stderr goes to the test log.
CliRun run_tokenize(const std::string& args, const std::string& input) {
  const auto path = std::filesystem::temp_directory_path() / ("kapitsa_tokenize_" + std::to_string(fresh_seed()));
  std::ofstream(path, std::ios::binary) << input;
  const std::string command = std::string(KAPITSA_BIN) + " tokenize " + args + " < " + path.string();
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  std::string out;
  char buffer[65536];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) run.lines.push_back(line);
  std::filesystem::remove(path);
  return run;
}

TEST(TokenizeCli, EncodesAndDecodesGolden) {
  std::string encode_input, decode_input;
  for (const GoldenCase& c : qwen3_golden()) {
    encode_input += Json(c.text).dump() + "\n";
    decode_input += Json(c.ids).dump() + "\n";
  }
  const CliRun encoded = run_tokenize("--model " + qwen3_dir(), encode_input);
  ASSERT_EQ(encoded.exit_code, 0);
  ASSERT_EQ(encoded.lines.size(), qwen3_golden().size());
  for (size_t i = 0; i < encoded.lines.size(); ++i)
    EXPECT_EQ(Json::parse(encoded.lines[i]).get<std::vector<int32_t>>(), qwen3_golden()[i].ids) << "line " << i + 1;

  const CliRun decoded = run_tokenize("--model " + qwen3_dir() + " --decode", decode_input);
  ASSERT_EQ(decoded.exit_code, 0);
  ASSERT_EQ(decoded.lines.size(), qwen3_golden().size());
  for (size_t i = 0; i < decoded.lines.size(); ++i)
    EXPECT_EQ(Json::parse(decoded.lines[i]).get<std::string>(), qwen3_golden()[i].decoded) << "line " << i + 1;
}

TEST(TokenizeCli, BadLinesAreReportedAndTheRestStillAnswered) {
  const CliRun run = run_tokenize("--model " + qwen3_dir(), "\"hi\"\n[1, 2]\nnot json\n\"there\"\n");
  EXPECT_EQ(run.exit_code, 1);
  ASSERT_EQ(run.lines.size(), 2u);
  EXPECT_EQ(run.lines[0], Json(qwen3_tokenizer().encode("hi")).dump());
  EXPECT_EQ(run.lines[1], Json(qwen3_tokenizer().encode("there")).dump());

  const CliRun bad_ids = run_tokenize("--model " + qwen3_dir() + " --decode", "[9999999]\n[-1]\n[\"a\"]\n[14990]\n");
  EXPECT_EQ(bad_ids.exit_code, 1);
  ASSERT_EQ(bad_ids.lines.size(), 1u);
  EXPECT_EQ(bad_ids.lines[0], Json(qwen3_tokenizer().decode(std::vector<int32_t>{14990})).dump());
}

TEST(TokenizeCli, MissingTokenizerIsAnError) {
  const CliRun run = run_tokenize("--model /nonexistent/model/dir", "\"x\"\n");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(run.lines.empty());
}

}  // namespace
}  // namespace kapitsa::testing
