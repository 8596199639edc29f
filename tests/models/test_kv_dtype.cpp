// KV cache element types (issue 12 part 6) on every reference fixture, both families: with f32 pages
// the prompt logits and the greedy continuation stay within today's 1e-4 of transformers; with bf16
// and f16 pages (K and V rounded when written, widened when read) the logits stay within the bounds
// below and the greedy continuation is the reference's, token for token.
// The measured errors are printed (the numbers docs/decisions.md quotes); the CLI's --kv-dtype is
// checked at the end (accepted values give the same greedy ids, others a clear error).
#include "cli_runner.h"
#include "fixture_reference.h"
#include "models/model.h"
#include "ops/ops.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <tuple>

namespace kapitsa::testing {
namespace {

// Bounds on the relative error (‖a − ref‖₂ / ‖ref‖₂, test_util.h) against transformers' float32, from the
// worst case measured over the 7 fixtures (docs/decisions.md, "KV cache dtype"), with margin:
// - greedy steps (one row each): bf16 worst 5.2e-3 (nemotron-h-tiny) → 1.5e-2; f16 worst 1.6e-4 → 1e-3.
// - all prompt rows together: f16 worst 1.2e-4 → 1e-3; bf16 worst 0.085 (nemotron-h-tiny) → 0.2. The bf16
//   prompt figure is one row jumping (row 97 at 0.95 alone, then decaying over ~10 rows; qwen3-next-tiny
//   likewise from row 45, 0.039 overall): on nemotron-h-tiny a near-tie in MoE expert routing flips at
//   row 97 (traced through the hidden states, docs/decisions.md); without such a jump bf16 prompts
//   measure 3e-4 – 8.5e-4.
struct Bounds {
  double prompt, greedy;
};
Bounds bounds(DType kv) {
  if (kv == DType::bf16) return {0.2, 1.5e-2};
  if (kv == DType::f16) return {1e-3, 1e-3};
  return {1e-4, 1e-4};  // f32: test_fixtures.cpp's tolerance
}

struct Case {
  std::string path;  // relative to tests/
  bool rope_bf16 = true;
  DType kv = DType::f32;
  double floor = 0;  // bounds below this are raised to it: kFourBitDemoFloor for the 4-bit demo target
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.path << " " << dtype_name(c.kv); }

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

class KvDtypeTest : public ::testing::TestWithParam<Case> {};

TEST_P(KvDtypeTest, LogitsWithinBoundAndGreedyIdentical) {
  const Case& c = GetParam();
  const std::string dir = test_data_path(c.path);
  FixtureReference ref = load_fixture_reference(dir);
  auto loaded = models::load_model(dir, models::LoadOptions{c.rope_bf16});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const models::Model& model = **loaded;
  const int64_t T = static_cast<int64_t>(ref.prompt_ids.size()), V = model.info().vocab_size;
  const int64_t N = static_cast<int64_t>(ref.greedy_ids.size());

  models::KvLayout layout = model.kv_layout();
  ASSERT_GT(layout.n_layers, 0);
  layout.dtype = c.kv;
  auto pool = std::make_shared<models::KvPagePool>(layout);
  auto state = model.new_state(T + N, pool);
  Buffer logits = Buffer::allocate(DType::f32, {T, V});
  ASSERT_TRUE(model.forward(ref.prompt_ids, *state, logits).ok());
  ASSERT_EQ(pool->k(0).dtype(), c.kv);
  const Bounds bound = {std::max(bounds(c.kv).prompt, c.floor), std::max(bounds(c.kv).greedy, c.floor)};
  const double prompt_error = relative_error(logits, ref.prompt_logits);
  EXPECT_LE(prompt_error, bound.prompt);

  double greedy_error = 0;
  Buffer step = Buffer::allocate(DType::f32, {1, V});
  ops::copy(logits.tensor().rows(T - 1, T), step);
  for (int64_t i = 0; i < N; ++i) {
    const double e = relative_error(step, ref.greedy_logits.rows(i, i + 1));
    greedy_error = std::max(greedy_error, e);
    EXPECT_LE(e, bound.greedy) << "greedy step " << i;
    const int32_t next = argmax(step.f32(), V);
    ASSERT_EQ(next, ref.greedy_ids[static_cast<size_t>(i)]) << "greedy step " << i;
    const int32_t one[] = {next};
    ASSERT_TRUE(model.forward(one, *state, step).ok());
  }
  std::printf("[ kv dtype ] %-40s %-4s prompt %.3g greedy %.3g (%lld greedy tokens identical)\n", c.path.c_str(),
              std::string(dtype_name(c.kv)).c_str(), prompt_error, greedy_error, static_cast<long long>(N));
}

std::vector<Case> cases() {
  const std::tuple<std::string, bool, double> fixtures[] = {
      {"../models/demo/target", false, kFourBitDemoFloor},   {"../models/demo/draft", false, 0},
      {"fixtures/qwen35-dense-tiny", true, 0},  {"fixtures/qwen35-moe-tiny", true, 0},
      {"fixtures/qwen3-next-tiny", true, 0},    {"fixtures/nemotron-h-tiny", true, 0},
      {"fixtures/nemotron-h-latent-tiny", true, 0}};
  std::vector<Case> out;
  for (const auto& [path, rope, floor] : fixtures)
    for (DType kv : {DType::f32, DType::bf16, DType::f16}) out.push_back({path, rope, kv, floor});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvDtypeTest, ::testing::ValuesIn(cases()));

// A pool of bf16 pages takes half the bytes per token of an f32 one, and f16 the same as bf16.
TEST(KvDtype, BytesPerTokenFollowTheElementType) {
  models::KvLayout layout{3, 2, 8};
  EXPECT_EQ(layout.bytes_per_token(), size_t{2 * 3 * 2 * 8 * 4});
  layout.dtype = DType::bf16;
  EXPECT_EQ(layout.bytes_per_token(), size_t{2 * 3 * 2 * 8 * 2});
  models::KvPagePool pool(layout, 16);
  EXPECT_EQ(pool.page_bytes(), size_t{2 * 3 * 2 * 8 * 2 * 16});
  layout.dtype = DType::f16;
  EXPECT_EQ(layout.bytes_per_token(), size_t{2 * 3 * 2 * 8 * 2});
  EXPECT_FALSE(models::is_kv_dtype(DType::i32));
  EXPECT_FALSE(models::is_kv_dtype(DType::f8_e4m3));
}

// `kapitsa logits --kv-dtype`: bf16 and f16 give the reference's greedy ids; anything else is refused
// with a message naming the flag and the allowed values.
TEST(KvDtypeCli, LogitsFlagChoosesThePagesAndRejectsOthers) {
  const std::string dir = test_data_path("fixtures/nemotron-h-tiny");
  FixtureReference ref = load_fixture_reference(dir);
  ScratchDir scratch;
  {
    std::ofstream ids(scratch.path("ids.json"));
    ids << "[";
    for (size_t i = 0; i < ref.prompt_ids.size(); ++i) ids << (i ? "," : "") << ref.prompt_ids[i];
    ids << "]";
  }
  const int N = 8;
  for (const char* kv : {"f32", "bf16", "f16"}) {
    const std::string out = scratch.path(std::string(kv) + ".safetensors");
    const CommandResult r = run_kapitsa("logits --rope-bf16 --kv-dtype " + std::string(kv) + " --model " + dir +
                                        " --ids-file " + scratch.path("ids.json") + " --out " + out +
                                        " --generate " + std::to_string(N));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto file = weights::Checkpoint::open(out);
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto greedy = file->get_any_shape("greedy_ids", {DType::i32});
    ASSERT_TRUE(greedy.ok()) << greedy.error().message;
    for (int i = 0; i < N; ++i) EXPECT_EQ(greedy->data_as<int32_t>()[i], ref.greedy_ids[static_cast<size_t>(i)]) << kv << " " << i;
  }
  const CommandResult bad = run_kapitsa("logits --kv-dtype f8 --model " + dir + " --ids-file " + scratch.path("ids.json") +
                                        " --out " + scratch.path("bad.safetensors"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--kv-dtype"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("f8"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("bf16"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kapitsa::testing
