// `kapitsa dev random-model` writes a checkpoint in the released layout: for each fixture config the
// random checkpoint has exactly the fixture's language-model tensor names, shapes and dtype (bf16),
// is deterministic in its seed, and runs through `kapitsa logits` to finite logits.
#include "cli_runner.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace kapitsa::testing {
namespace {

class RandomCheckpoint : public ::testing::TestWithParam<std::string> {};

bool is_language_model_tensor(const std::string& name) {
  return name.rfind("model.visual.", 0) != 0 && name.rfind("mtp.", 0) != 0;
}

TEST_P(RandomCheckpoint, MatchesTheReleasedLayoutAndRuns) {
  const std::string fixture = test_data_path("fixtures/" + GetParam());
  ScratchDir dir;
  const CommandResult made = run_kapitsa("dev random-model --config " + fixture + "/config.json --out " + dir.path("m") + " --seed 5");
  ASSERT_EQ(made.exit_code, 0) << made.output;

  auto real = weights::Checkpoint::open(fixture);
  auto random = weights::Checkpoint::open(dir.path("m"));
  ASSERT_TRUE(real.ok() && random.ok());
  std::vector<std::string> expected;
  for (const auto& n : real->names())
    if (is_language_model_tensor(n)) expected.push_back(n);
  EXPECT_EQ(random->names(), expected);
  for (const auto& n : expected) {
    if (!random->contains(n)) continue;
    EXPECT_EQ(random->find(n)->shape, real->find(n)->shape) << n;
    EXPECT_EQ(random->find(n)->dtype, DType::bf16) << n;
  }

  // Same seed, same bytes.
  const CommandResult again = run_kapitsa("dev random-model --config " + fixture + "/config.json --out " + dir.path("m2") + " --seed 5");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  std::ifstream a(dir.path("m/model.safetensors"), std::ios::binary), b(dir.path("m2/model.safetensors"), std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b)));

  std::ofstream(dir.path("ids.json")) << "[5, 17, 300, 2000, 9]";
  const CommandResult ran = run_kapitsa("logits --model " + dir.path("m") + " --ids-file " + dir.path("ids.json") +
                                        " --out " + dir.path("out.safetensors") + " --generate 3");
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  auto out = weights::Checkpoint::open(dir.path("out.safetensors"));
  ASSERT_TRUE(out.ok());
  auto logits = out->get_any_shape("logits", {DType::f32});
  ASSERT_TRUE(logits.ok());
  double sum_sq = 0;
  for (int64_t i = 0; i < logits->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits->f32()[i]));
    sum_sq += double(logits->f32()[i]) * logits->f32()[i];
  }
  EXPECT_GT(sum_sq, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Qwen, RandomCheckpoint,
                         ::testing::Values("qwen35-dense-tiny", "qwen35-moe-tiny", "qwen3-next-tiny"));
INSTANTIATE_TEST_SUITE_P(Nemotron, RandomCheckpoint, ::testing::Values("nemotron-h-tiny", "nemotron-h-latent-tiny"));

}  // namespace
}  // namespace kapitsa::testing
