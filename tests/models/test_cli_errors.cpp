// `kapitsa logits` on broken inputs: each exits non-zero with a message naming the file and the field
// or tensor. Checkpoints are corrupted copies of a fixture, rewritten through the safetensors writer.
#include "cli_runner.h"
#include "test_util.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kapitsa::testing {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = "fixtures/qwen35-dense-tiny";

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy_file(test_data_path(kFixture + "/config.json"), dir_.path("config.json"));
    std::ofstream(dir_.path("ids.json")) << "[1, 2, 3, 4]";
  }
  // Rewrites model.safetensors from the fixture's tensors, letting `edit` change the list.
  template <typename Edit>
  void write_model(Edit edit) {
    auto ckpt = weights::Checkpoint::open(test_data_path(kFixture + "/model.safetensors"));
    ASSERT_TRUE(ckpt.ok());
    std::vector<weights::NamedTensor> tensors;
    for (const auto& name : ckpt->names()) {
      auto t = ckpt->get_any_shape(name, {DType::bf16, DType::f32});
      if (t.ok()) tensors.push_back({name, *t});
    }
    edit(tensors);
    ASSERT_TRUE(weights::write_safetensors(dir_.path("model.safetensors"), tensors).ok());
  }
  CommandResult logits() {
    return run_kapitsa("logits --model " + dir_.path() + " --ids-file " + dir_.path("ids.json") + " --out " +
                       dir_.path("out.safetensors"));
  }
  void expect_error(const std::vector<std::string>& fragments) {
    const CommandResult r = logits();
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (const auto& f : fragments) EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in: " << r.output;
    EXPECT_FALSE(fs::exists(dir_.path("out.safetensors"))) << "no output may be written on error";
  }
  ScratchDir dir_;
};

TEST_F(CliErrors, IntactCopyWorks) {
  write_model([](auto&) {});
  const CommandResult r = logits();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_.path("out.safetensors")));
}

// A checkpoint in a format Kapitsa does not read yet (here GPTQ, as its releases declare it) is
// named as such, with what is supported, not a dtype error on its first tensor.
TEST_F(CliErrors, UnsupportedQuantMethodIsNamed) {
  write_model([](auto&) {});
  std::ifstream in(dir_.path("config.json"));
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  config.insert(config.find('{') + 1, R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128},)");
  std::ofstream(dir_.path("config.json")) << config;
  expect_error({"config.json", "quant_method \"gptq\"", "does not load yet", "FP8 E4M3", "MLX affine", "GGUF"});
}

// modelopt's algorithms it does not load (W4A8_AWQ) are named, not only "modelopt".
TEST_F(CliErrors, ModeloptNamesItsAlgorithm) {
  write_model([](auto&) {});
  std::ifstream in(dir_.path("config.json"));
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  config.insert(config.find('{') + 1, R"("quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"},)");
  std::ofstream(dir_.path("config.json")) << config;
  expect_error({"config.json", "quant_method \"modelopt\" (W4A8_AWQ)", "does not load yet"});
}

// A broken .gguf is named with its problem, for logits and for run (which reads its tokenizer first).
TEST_F(CliErrors, BrokenGgufFileIsNamed) {
  std::ofstream(dir_.path("model.gguf")) << "GGUF";
  std::ofstream(dir_.path("tokenizer.json")) << "{}";
  const CommandResult logits = run_kapitsa("logits --ids-file " + dir_.path("ids.json") + " --out y --model " +
                                           dir_.path("model.gguf"));
  EXPECT_NE(logits.exit_code, 0) << logits.output;
  EXPECT_NE(logits.output.find("model.gguf: truncated"), std::string::npos) << logits.output;
  fs::remove(dir_.path("tokenizer.json"));  // run then reads the tokenizer from the file's metadata
  const CommandResult run = run_kapitsa("run --max-tokens 2 hi --model " + dir_.path("model.gguf"));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("model.gguf: truncated"), std::string::npos) << run.output;
}

TEST_F(CliErrors, TruncatedFile) {
  write_model([](auto&) {});
  fs::resize_file(dir_.path("model.safetensors"), fs::file_size(dir_.path("model.safetensors")) - 100);
  expect_error({"model.safetensors", "beyond the end of the file"});
}

TEST_F(CliErrors, HeaderOffsetsBeyondFile) {
  write_model([](auto&) {});
  // Grow the header's claimed length past the file size.
  std::fstream f(dir_.path("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t huge = fs::file_size(dir_.path("model.safetensors")) + 10;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f.close();
  expect_error({"model.safetensors", "truncated"});
}

TEST_F(CliErrors, MissingTensor) {
  write_model([](auto& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.name == "model.language_model.layers.3.self_attn.k_proj.weight"; });
  });
  expect_error({"model.safetensors", "missing tensor 'model.language_model.layers.3.self_attn.k_proj.weight'"});
}

TEST_F(CliErrors, WrongShape) {
  write_model([](auto& tensors) {
    for (auto& t : tensors)
      if (t.name == "model.language_model.layers.0.linear_attn.out_proj.weight") t.tensor = t.tensor.reshape({64, 256});
  });
  expect_error({"model.safetensors", "'model.language_model.layers.0.linear_attn.out_proj.weight' has shape [64, 256]"});
}

TEST_F(CliErrors, WrongDtype) {
  write_model([](auto& tensors) {
    for (auto& t : tensors)
      if (t.name == "model.language_model.layers.0.mlp.up_proj.weight")
        t.tensor = Tensor(DType::i16, t.tensor.shape(), t.tensor.data());
  });
  expect_error({"'model.language_model.layers.0.mlp.up_proj.weight' has dtype I16"});
}

TEST_F(CliErrors, UnknownModelType) {
  write_model([](auto&) {});
  std::ofstream(dir_.path("config.json")) << R"({"model_type": "llama", "hidden_size": 8})";
  expect_error({"config.json", "unknown model_type 'llama'", "qwen3_5"});
}

TEST_F(CliErrors, MalformedConfig) {
  write_model([](auto&) {});
  std::ofstream(dir_.path("config.json")) << R"({"model_type": "qwen3_5", "text_config": {)";
  expect_error({"config.json", "malformed JSON"});
}

TEST_F(CliErrors, MissingConfigField) {
  write_model([](auto&) {});
  std::ifstream in(test_data_path(kFixture + "/config.json"));
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  const auto at = text.find("\"hidden_size\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"hidden_size\"").size(), "\"hidden_sizes\"");
  std::ofstream(dir_.path("config.json")) << text;
  expect_error({"config.json", "'text_config.hidden_size' is required"});
}

TEST_F(CliErrors, IdsOutOfVocabulary) {
  write_model([](auto&) {});
  std::ofstream(dir_.path("ids.json")) << "[1, 2, 99999]";
  expect_error({"ids.json", "token id 99999 at index 2", "vocabulary"});
}

TEST_F(CliErrors, IdsNotAnArray) {
  write_model([](auto&) {});
  std::ofstream(dir_.path("ids.json")) << R"({"ids": [1]})";
  expect_error({"ids.json", "array"});
}

}  // namespace
}  // namespace kapitsa::testing

namespace kapitsa::testing {
namespace {

// `kapitsa` alone says where to start and lists every command; an unknown command names itself and
// the commands, and fails with the usage exit code.
TEST(CliStart, NoArgumentsPrintsWhereToStart) {
  const CommandResult r = run_kapitsa("");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kapitsa run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Commands: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("serve"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("doctor"), std::string::npos) << r.output;
}

TEST(CliStart, UnknownCommandNamesItselfAndTheCommands) {
  const CommandResult r = run_kapitsa("frobnicate --model x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'frobnicate'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("run, chat"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kapitsa::testing
