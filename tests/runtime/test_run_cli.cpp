// `kapitsa run` and `kapitsa chat` end to end on the bundled demo model (a trained tiny Qwen3.5 with
// tokenizer and chat template): text comes out, --output json ids equal `kapitsa logits --generate`'s
// greedy ids with the same --kv-dtype (run's default bf16, logits' default f32, each either way), the
// chat reuses the prefix cache on its second turn, --spec ngram / draft / auto give the same ids, and bad
// input (also a bad --kv-dtype, --spec, --spec-k, or a draft with another tokenizer) fails clearly.
#include "cuda_test.h"
#include "models/cli_runner.h"
#include "test_util.h"
#include "text/tokenizer/tokenizer.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kapitsa::testing {
namespace {

std::string demo_dir() { return test_data_path("../models/demo/target"); }

std::string stdout_only(const std::string& args) {
  const std::string command = std::string(KAPITSA_BIN) + " " + args + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

TEST(RunCli, StreamsTextFromTheDemoModel) {
  CommandResult r = run_kapitsa("run --model " + demo_dir() + " --max-tokens 20 --temperature 0 --no-template \"def fib(n):\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
  const std::string text = stdout_only("run --model " + demo_dir() + " --max-tokens 20 --temperature 0 --no-template \"def fib(n):\"");
  EXPECT_GT(text.size(), 5u) << text;
}

// --stop takes one text per flag (repeatable), so the prompt may follow it; the output ends where a
// stop text would begin.
TEST(RunCli, StopTextsBeforeThePromptCutTheOutput) {
  const std::string args = "run --model " + demo_dir() + " --max-tokens 24 --temperature 0 --no-template ";
  std::string full = stdout_only(args + "\"def fib(n):\"");
  while (!full.empty() && full.back() == '\n') full.pop_back();
  ASSERT_GT(full.size(), 12u) << full;
  const std::string stop = full.substr(full.size() / 2, 3);
  ASSERT_GT(full.find(stop), 0u) << "stop text '" << stop << "' would leave nothing to compare";
  std::string cut = stdout_only(args + "--stop '" + stop + "' --stop 'never in the output' \"def fib(n):\"");
  while (!cut.empty() && cut.back() == '\n') cut.pop_back();
  EXPECT_EQ(cut, full.substr(0, full.find(stop))) << "stop text '" << stop << "'";
}

TEST(RunCli, ChatTemplatePromptProducesAReply) {
  CommandResult r = run_kapitsa("run --model " + demo_dir() + " --max-tokens 24 --seed 3 \"Write a haiku about rivers.\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prompt"), std::string::npos);
}

// run_flag / logits_flag: the --kv-dtype each is given ("" → its default: bf16 for run, f32 for logits).
void expect_run_ids_equal_logits_greedy(const std::string& run_flag, const std::string& logits_flag) {
  SCOPED_TRACE("run '" + run_flag + "', logits '" + logits_flag + "'");
  ScratchDir dir;
  const std::string ids_file = dir.path("ids.json");
  std::ofstream(ids_file) << "[750, 1668, 1445, 2238, 1025, 12, 279, 220]";
  const int n = 16;
  const std::string json = stdout_only("run --model " + demo_dir() + " --prompt-ids " + ids_file + run_flag +
                                       " --output json --temperature 0 --ignore-eos --max-tokens " + std::to_string(n));
  ASSERT_FALSE(json.empty());
  CommandResult logits = run_kapitsa("logits --model " + demo_dir() + " --ids-file " + ids_file + logits_flag + " --out " +
                                     dir.path("out.safetensors") + " --generate " + std::to_string(n));
  ASSERT_EQ(logits.exit_code, 0) << logits.output;
  auto file = weights::SafetensorsFile::open(dir.path("out.safetensors"));
  ASSERT_TRUE(file.ok()) << file.error().message;
  const auto& entry = (*file)->entries().at("greedy_ids");
  std::vector<int32_t> greedy(static_cast<size_t>(n));
  std::memcpy(greedy.data(), (*file)->data(entry), greedy.size() * sizeof(int32_t));
  std::string expected = "[";
  for (size_t i = 0; i < greedy.size(); ++i) expected += (i ? "," : "") + std::to_string(greedy[i]);
  expected += "]\n";
  EXPECT_EQ(json, expected);
}

TEST(RunCli, JsonIdsEqualGreedyIdsOfKapitsaLogits) {
  expect_run_ids_equal_logits_greedy("", " --kv-dtype bf16");
  expect_run_ids_equal_logits_greedy(" --kv-dtype f32", "");
  expect_run_ids_equal_logits_greedy(" --kv-dtype f16", " --kv-dtype f16");
  // Speculative decoding changes nothing in the output.
  expect_run_ids_equal_logits_greedy(" --spec ngram --spec-k 6", " --kv-dtype bf16");
  const std::string draft = test_data_path("../models/demo/draft");
  expect_run_ids_equal_logits_greedy(" --spec draft --draft " + draft + " --spec-k 3", " --kv-dtype bf16");
  expect_run_ids_equal_logits_greedy(" --spec auto --draft " + draft, " --kv-dtype bf16");
  // The demo target's own MTP head (what --spec auto picks without a draft).
  expect_run_ids_equal_logits_greedy(" --spec mtp --spec-k 2", " --kv-dtype bf16");
  expect_run_ids_equal_logits_greedy(" --spec auto", " --kv-dtype bf16");
}

TEST(RunCli, MtpHeadIsNamedInTheSummaryAndNeedsAHead) {
  CommandResult r = run_kapitsa("run --model " + demo_dir() + " --spec auto --max-tokens 30 --temperature 0 --ignore-eos "
                                "--no-template \"def add(a, b):\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mtp: "), std::string::npos) << r.output;
  // The demo target without its model-mtp.safetensors has no head.
  ScratchDir dir;
  const std::filesystem::path demo = demo_dir();
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(demo / f, std::filesystem::path(dir.path()) / f);
  CommandResult none = run_kapitsa("run --model " + dir.path() + " --spec mtp hi");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("no multi-token-prediction head"), std::string::npos) << none.output;
}

TEST(RunCli, DraftModelIsNamedInTheSummary) {
  CommandResult r = run_kapitsa("run --model " + demo_dir() + " --spec draft --draft " + test_data_path("../models/demo/draft") +
                                " --max-tokens 40 --temperature 0 --ignore-eos --no-template \"def add(a, b):\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("draft: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("guessed tokens accepted"), std::string::npos) << r.output;
}

// On a GPU the draft model runs there too (a draft on the cpu was slower a guess than the target's own
// step): both models report their weights on the GPU, and the ids are plain decoding's.
TEST(RunCli, DraftModelRunsOnTheTargetsGpu) {
  KAPITSA_SKIP_WITHOUT_GPU();
  const std::string args = "run --model " + demo_dir() + " --device cuda --max-tokens 40 --temperature 0 --ignore-eos "
                           "--no-template --output json ";
  const std::string plain = stdout_only(args + "\"def add(a, b):\"");
  CommandResult r = run_kapitsa(args + "--spec draft --draft " + test_data_path("../models/demo/draft") + " \"def add(a, b):\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t on_gpu = 0;
  for (size_t at = r.output.find("weights on the GPU"); at != std::string::npos; at = r.output.find("weights on the GPU", at + 1))
    ++on_gpu;
  EXPECT_EQ(on_gpu, 2u) << "the target's and the draft's weights on the GPU:\n" << r.output;
  ASSERT_NE(plain.find(']'), std::string::npos) << plain;
  EXPECT_NE(r.output.find(plain.substr(0, plain.find(']') + 1)), std::string::npos) << "plain: " << plain << "\n" << r.output;
}

// A draft whose tokenizer maps one id to another token is refused, naming the folder and the id.
TEST(RunCli, DraftWithAnotherTokenizerIsRefused) {
  ScratchDir dir;
  const std::filesystem::path draft = test_data_path("../models/demo/draft");
  std::filesystem::create_directories(dir.path("draft"));
  for (const char* f : {"config.json", "model.safetensors", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(draft / f, std::filesystem::path(dir.path("draft")) / f);
  std::ifstream in(draft / "tokenizer.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Two vocabulary entries swap their ids: "def" and "class" become each other.
  const size_t a = json.find("\"def\":"), b = json.find("\"class\":");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const size_t a_end = json.find_first_of(",}", a), b_end = json.find_first_of(",}", b);
  const std::string a_id = json.substr(a + 6, a_end - a - 6), b_id = json.substr(b + 8, b_end - b - 8);
  std::string swapped = json;
  if (a < b) {
    swapped.replace(b + 8, b_end - b - 8, a_id);
    swapped.replace(a + 6, a_end - a - 6, b_id);
  } else {
    swapped.replace(a + 6, a_end - a - 6, b_id);
    swapped.replace(b + 8, b_end - b - 8, a_id);
  }
  std::ofstream(dir.path("draft/tokenizer.json")) << swapped;
  CommandResult r = run_kapitsa("run --model " + demo_dir() + " --spec draft --draft " + dir.path("draft") + " hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("its tokenizer differs from the model's"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir.path("draft")), std::string::npos) << r.output;
}

TEST(RunCli, ChatReusesTheCacheOnTheSecondTurn) {
  ScratchDir dir;
  std::ofstream(dir.path("input.txt")) << "Hello! Who are you?\nTell me more.\n";
  CommandResult r = run_kapitsa("chat --model " + demo_dir() + " --max-tokens 16 --seed 1 < " + dir.path("input.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Two statistics lines; the second reports cached prompt tokens.
  const size_t first = r.output.find("cached)");
  ASSERT_NE(first, std::string::npos) << r.output;
  const size_t second = r.output.find("cached)", first + 1);
  ASSERT_NE(second, std::string::npos) << r.output;
  const size_t open = r.output.rfind('(', second);
  EXPECT_NE(r.output.substr(open, second - open), "(0 ") << r.output;
}

// Every token prefilled once: after each reply `kapitsa chat` preloads the conversation as the next
// turn renders it (the reply's reasoning dropped), so turn 2 prefills exactly its new user turn and
// generation prompt — for the demo model's Qwen3.5 template and Nemotron 3's, thinking on and off.
TEST(RunCli, ChatTurnTwoPrefillsOnlyTheNewTurn) {
  namespace fs = std::filesystem;
  auto tok = text::Tokenizer::load(demo_dir());
  ASSERT_TRUE(tok.ok());
  for (const std::string name : {"", "nemotron3-nano"}) {
    for (const bool think : {true, false}) {
      SCOPED_TRACE(name + (think ? " thinking" : " no thinking"));
      ScratchDir dir;
      std::string model = demo_dir();
      if (!name.empty()) {
        model = dir.path("model");
        fs::create_directories(model);
        for (const auto& entry : fs::directory_iterator(demo_dir())) fs::create_symlink(entry.path(), fs::path(model) / entry.path().filename());
        fs::copy_file(test_data_path("text/data/templates/" + name + ".jinja"), fs::path(model) / "chat_template.jinja");
      }
      std::ofstream(dir.path("input.txt")) << "Hello! Who are you?\nTell me more.\n";
      CommandResult r = run_kapitsa("chat --model " + model + (think ? "" : " --no-think") + " --max-tokens 12 --seed 3 < " +
                                    dir.path("input.txt"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      // "prompt P tokens (C cached)", twice.
      std::vector<std::pair<int, int>> turns;
      for (size_t at = r.output.find("prompt "); at != std::string::npos; at = r.output.find("prompt ", at + 1)) {
        int p = 0, c = 0;
        if (std::sscanf(r.output.c_str() + at, "prompt %d tokens (%d cached)", &p, &c) == 2) turns.emplace_back(p, c);
      }
      ASSERT_EQ(turns.size(), 2u) << r.output;
      const std::string generation_prompt = name.empty() ? (think ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n")
                                                         : (think ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think></think>");
      const size_t new_turn = tok->encode("<|im_start|>user\nTell me more.<|im_end|>\n" + generation_prompt).size();
      EXPECT_EQ(turns[1].first - turns[1].second, static_cast<int>(new_turn)) << r.output;
      // At least turn 1's history (its prompt without the generation prompt) is reused.
      EXPECT_GE(turns[1].second, turns[0].first - static_cast<int>(tok->encode(generation_prompt).size())) << r.output;
    }
  }
}

// The demo model with a Nemotron 3 or Nemotron Nano v2 template instead of its own: `kapitsa chat` renders
// it through the shared chat-prompt module (turn boundary, end-of-turn ids, the template's reply formats),
// answers, and reuses the cache on the second turn, thinking on and off.
TEST(RunCli, ChatWithNemotronTemplates) {
  namespace fs = std::filesystem;
  for (const std::string name : {"nemotron3-nano", "nemotron-nano-v2"}) {
    for (const std::string flags : {"", " --no-think"}) {
      SCOPED_TRACE(name + flags);
      ScratchDir dir;
      const fs::path model = dir.path("model");
      fs::create_directories(model);
      for (const auto& entry : fs::directory_iterator(demo_dir())) fs::create_symlink(entry.path(), model / entry.path().filename());
      fs::copy_file(test_data_path("text/data/templates/" + name + ".jinja"), model / "chat_template.jinja");
      std::ofstream(dir.path("input.txt")) << "Hello! Who are you?\nTell me more.\n";
      CommandResult r = run_kapitsa("chat --model " + model.string() + flags + " --max-tokens 12 --seed 2 < " + dir.path("input.txt"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const size_t first = r.output.find("cached)");
      ASSERT_NE(first, std::string::npos) << r.output;
      const size_t second = r.output.find("cached)", first + 1);
      ASSERT_NE(second, std::string::npos) << r.output;
      const size_t open = r.output.rfind('(', second);
      EXPECT_NE(r.output.substr(open, second - open), "(0 ") << r.output;
    }
  }
}

TEST(RunCli, BadInputFailsClearly) {
  CommandResult none = run_kapitsa("run --model /nonexistent/model \"hi\"");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("/nonexistent/model"), std::string::npos) << none.output;
  CommandResult both = run_kapitsa("run --model " + demo_dir());
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.output.find("give a prompt"), std::string::npos) << both.output;
  ScratchDir dir;
  std::ofstream(dir.path("bad.json")) << "[1, 2, 99999999]";
  CommandResult bad = run_kapitsa("run --model " + demo_dir() + " --prompt-ids " + dir.path("bad.json"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("outside the vocabulary"), std::string::npos) << bad.output;
  for (const std::string command : {"run", "chat", "serve"}) {
    CommandResult kv = run_kapitsa(command + " --model " + demo_dir() + " --kv-dtype q8" + (command == "run" ? " hi" : ""));
    EXPECT_NE(kv.exit_code, 0) << command;
    EXPECT_NE(kv.output.find("--kv-dtype"), std::string::npos) << command << ": " << kv.output;
    EXPECT_NE(kv.output.find("q8"), std::string::npos) << command << ": " << kv.output;
    // Speculative decoding flags: an unknown proposer and an out-of-range k are named.
    CommandResult spec = run_kapitsa(command + " --model " + demo_dir() + " --spec eagle" + (command == "run" ? " hi" : ""));
    EXPECT_NE(spec.exit_code, 0) << command;
    EXPECT_NE(spec.output.find("--spec must be 'none', 'ngram', 'draft', 'mtp' or 'auto', got 'eagle'"), std::string::npos)
        << command << ": " << spec.output;
    CommandResult no_draft = run_kapitsa(command + " --model " + demo_dir() + " --spec draft" + (command == "run" ? " hi" : ""));
    EXPECT_NE(no_draft.exit_code, 0) << command;
    EXPECT_NE(no_draft.output.find("--spec draft needs --draft DIR"), std::string::npos) << command << ": " << no_draft.output;
    CommandResult k = run_kapitsa(command + " --model " + demo_dir() + " --spec ngram --spec-k 0" + (command == "run" ? " hi" : ""));
    EXPECT_NE(k.exit_code, 0) << command;
    EXPECT_NE(k.output.find("--spec-k must be between 1 and 32"), std::string::npos) << command << ": " << k.output;
  }
}

}  // namespace
}  // namespace kapitsa::testing
