// MLX affine checkpoints end to end: each fixture quantized by tests/models/affine_checkpoint.h loads
// and runs; 8-bit logits stay close to the bf16 model's and 4-bit keeps its top-1 token on most
// positions (bounds below, measured on these fixtures with margin); resident bytes shrink as the format
// says; cpu and ref agree on a quantized model; and every kind of bad file or config is an error
// naming the file, the tensor and the problem.
#include "affine_checkpoint.h"
#include "cli_runner.h"
#include "fixture_reference.h"
#include "model_logits.h"
#include "models/model.h"
#include "ops/ops.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <limits>

namespace kapitsa::testing {
namespace {

// Bounds per model. The demo model is trained: its logits have real margins, and the bounds are the
// ones a user would care about. The fixtures are random-weight models whose logits are nearly flat
// (tiny margins between tokens) and whose outputs move ~10× more than their weights: there the test
// asserts a loose closeness for 8 bits and that 4 bits are further away (the codes are really read).
struct AffineCase {
  std::string path;  // relative to tests/
  double max_error8;  // relative error of the 8-bit prompt logits
  double min_top1_8;  // top-1 agreement of 8-bit
  double min_top1_4;  // top-1 agreement of 4-bit
};

void PrintTo(const AffineCase& c, std::ostream* os) { *os << c.path; }

class AffineFixture : public ::testing::TestWithParam<AffineCase> {};

// Group 32 for both widths. The demo draft stands for a trained bf16 model (the demo target ships 4-bit).
// Measured (session 27's draft; top-1 counting near ties, model_logits.h): draft 8-bit error 7.1e-3 and
// top-1 1.000 (0.939 without ties), 4-bit error 1.2e-1 and top-1 0.955 (0.894)
// (a 2.9M model quantized after training; the target, trained on its 4-bit weights at the end, loses 0.6%
// of held-out perplexity); fixtures 8-bit error 0.06–0.22 and top-1 0.65–0.93. Resident bytes:
// every quantized matrix at bits + 1 bits per weight (a bf16 scale and bias per 32) instead of 16.
TEST_P(AffineFixture, EightBitCloseToBf16AndFourBitKeepsTop1) {
  const AffineCase& c = GetParam();
  const std::string src = test_data_path(c.path);
  FixtureReference ref = load_fixture_reference(src);
  int64_t dense_bytes = 0, q8_bytes = 0, q4_bytes = 0;
  const Buffer dense = prompt_logits(src, ref.prompt_ids, &dense_bytes);
  ScratchDir q8, q4;
  ASSERT_TRUE(write_affine_checkpoint(src, q8.path(), {8, 32, {}}).ok());
  ASSERT_TRUE(write_affine_checkpoint(src, q4.path(), {4, 32, {}}).ok());
  const Buffer l8 = prompt_logits(q8.path(), ref.prompt_ids, &q8_bytes);
  const Buffer l4 = prompt_logits(q4.path(), ref.prompt_ids, &q4_bytes);
  ASSERT_FALSE(dense.tensor().empty() || l8.tensor().empty() || l4.tensor().empty());
  const double e8 = relative_error(l8, dense), e4 = relative_error(l4, dense);
  const double a8 = top1_agreement_beyond_ties(l8, dense), a4 = top1_agreement_beyond_ties(l4, dense);
  std::printf("%s: 8-bit rel. error %.2e top-1 %.3f (%.3f with near ties); 4-bit rel. error %.2e top-1 %.3f (%.3f); "
              "bytes %ld / %ld / %ld\n",
              c.path.c_str(), e8, top1_agreement(l8, dense), a8, e4, top1_agreement(l4, dense), a4,
              static_cast<long>(dense_bytes), static_cast<long>(q8_bytes), static_cast<long>(q4_bytes));
  EXPECT_LE(e8, c.max_error8);
  EXPECT_GE(a8, c.min_top1_8);
  EXPECT_GE(a4, c.min_top1_4);
  EXPECT_GT(e4, 2 * e8);  // fewer bits, more error: the codes are really used
  // 9/16 and 5/16 of the bytes for the quantized matrices (norms and the like stay f32 and uncounted)
  EXPECT_LT(q8_bytes, dense_bytes * 0.6);
  EXPECT_LT(q4_bytes, dense_bytes * 0.35);
}

INSTANTIATE_TEST_SUITE_P(Models, AffineFixture,
                         ::testing::Values(AffineCase{"../models/demo/draft", 1e-2, 0.98, 0.8},
                                           AffineCase{"fixtures/qwen35-dense-tiny", 0.3, 0.6, 0.0},
                                           AffineCase{"fixtures/qwen35-moe-tiny", 0.3, 0.6, 0.0},
                                           AffineCase{"fixtures/qwen3-next-tiny", 0.3, 0.6, 0.0},
                                           AffineCase{"fixtures/nemotron-h-tiny", 0.3, 0.6, 0.0},
                                           AffineCase{"fixtures/nemotron-h-latent-tiny", 0.3, 0.6, 0.0}));

// The ref backend (plain dequantize, then f64 dot products) and cpu agree on a quantized model. 3 bits:
// the f32-activation kernels throughout (4 and 8 bits at ≤ 8 tokens round x to int16 on VNNI builds:
// next test).
TEST(AffineModel, CpuMatchesRefBackend) {
  const std::string src = test_data_path("fixtures/qwen35-moe-tiny");
  FixtureReference ref = load_fixture_reference(src);
  ScratchDir q;
  ASSERT_TRUE(write_affine_checkpoint(src, q.path(), {3, 64, {}}).ok());
  const std::span<const int32_t> ids(ref.prompt_ids.data(), std::min<size_t>(ref.prompt_ids.size(), 24));
  const Buffer cpu = prompt_logits(q.path(), ids);
  ops::ScopedBackend on(ops::find_backend("ref"));
  const Buffer oracle = prompt_logits(q.path(), ids);
  EXPECT_LE(relative_error(cpu, oracle), 1e-5);
}

// Decode on the demo model, token by token (so every matmul is a GEMV: on AVX-512 VNNI builds the
// int16-activation kernel for 4 and 8 bits), cpu against ref's exact dequantize-then-f64: the rounding
// of activations to int16 keeps the greedy token and moves the logits little. Measured (this commit, a
// VNNI build, the bf16 demo draft quantized): 8-bit and 4-bit relative error 8.5e-5, top-1 identical at
// every position.
TEST(AffineModel, DecodeOnCpuMatchesRefOnTheDemoModel) {
  const std::string src = test_data_path("../models/demo/draft");
  FixtureReference ref = load_fixture_reference(src);
  for (int bits : {8, 4}) {
    ScratchDir q;
    ASSERT_TRUE(write_affine_checkpoint(src, q.path(), {bits, 64, {}}).ok());
    auto decode_logits = [&] {
      auto model = models::load_model(q.path());
      EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
      const int64_t T = std::min<int64_t>(32, static_cast<int64_t>(ref.prompt_ids.size())), V = (*model)->info().vocab_size;
      auto state = (*model)->new_state(T);
      Buffer logits = Buffer::allocate(DType::f32, {T, V});
      for (int64_t t = 0; t < T; ++t) {
        const Status s = (*model)->forward(std::span<const int32_t>(&ref.prompt_ids[t], 1), *state,
                                           logits.tensor().rows(t, t + 1));
        EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
      }
      return logits;
    };
    const Buffer cpu = decode_logits();
    Buffer oracle;
    {
      ops::ScopedBackend on(ops::find_backend("ref"));
      oracle = decode_logits();
    }
    const double e = relative_error(cpu, oracle), top1 = top1_agreement(cpu, oracle);
    std::printf("demo model %d-bit, decode cpu vs ref: relative error %.2e, top-1 %.3f\n", bits, e, top1);
    EXPECT_LE(e, 2e-2);
    EXPECT_GE(top1, 0.98);
  }
}

// Mixed recipes on the demo draft: one module at its own bits and group, the tied embedding (and so
// the head) kept dense with false, the rest 8-bit.
TEST(AffineModel, PerModuleOverrides) {
  const std::string src = test_data_path("../models/demo/draft");
  FixtureReference ref = load_fixture_reference(src);
  AffineRecipe recipe{8, 32, {}};
  recipe.modules["model.language_model.layers.0.mlp.down_proj"] = std::pair{4, 64};
  recipe.modules["model.language_model.embed_tokens"] = std::nullopt;
  ScratchDir q, all8;
  ASSERT_TRUE(write_affine_checkpoint(src, q.path(), recipe).ok());
  ASSERT_TRUE(write_affine_checkpoint(src, all8.path(), {8, 32, {}}).ok());
  int64_t mixed_bytes = 0, all8_bytes = 0;
  const Buffer dense = prompt_logits(src, ref.prompt_ids);
  const Buffer mixed = prompt_logits(q.path(), ref.prompt_ids, &mixed_bytes);
  const Buffer l8 = prompt_logits(all8.path(), ref.prompt_ids, &all8_bytes);
  // the 4-bit matrix is read at 4 bits: more error than all 8-bit (on the first edition's target 2.3e-2
  // against 4.7e-3)
  EXPECT_LE(relative_error(mixed, dense), 5e-2);
  EXPECT_GT(relative_error(mixed, dense), relative_error(l8, dense));
  EXPECT_GT(mixed_bytes, all8_bytes);  // the dense embedding outweighs one 4-bit matrix
}

// Bad files and configs: the load fails with a message naming where and what.
class AffineErrors : public ::testing::Test {
 protected:
  std::string load_error(const AffineRecipe& recipe, const AffineEdit& edit) {
    EXPECT_TRUE(write_affine_checkpoint(test_data_path("fixtures/qwen35-dense-tiny"), dir_.path(), recipe, edit).ok());
    auto model = models::load_model(dir_.path());
    EXPECT_FALSE(model.ok());
    return model.ok() ? std::string() : model.error().message;
  }
  static weights::NamedTensor* find(std::vector<weights::NamedTensor>& ts, const std::string& name) {
    for (auto& t : ts)
      if (t.name == name) return &t;
    ADD_FAILURE() << "no tensor " << name;
    return nullptr;
  }
  ScratchDir dir_;
  const std::string module_ = "model.language_model.layers.0.mlp.up_proj";
  std::vector<Buffer> keep_;
};

TEST_F(AffineErrors, MissingBiases) {
  const std::string msg = load_error({8, 32, {}}, [&](auto& ts, Json&) {
    std::erase_if(ts, [&](const weights::NamedTensor& t) { return t.name == module_ + ".biases"; });
  });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + module_ + ".biases' is missing"), std::string::npos) << msg;
}

TEST_F(AffineErrors, MissingScales) {
  const std::string msg = load_error({8, 32, {}}, [&](auto& ts, Json&) {
    std::erase_if(ts, [&](const weights::NamedTensor& t) { return t.name == module_ + ".scales"; });
  });
  EXPECT_NE(msg.find("'" + module_ + ".weight' is packed (U32) but '" + module_ + ".scales' is missing"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST_F(AffineErrors, ScalesOfTheWrongShape) {
  const std::string msg = load_error({8, 32, {}}, [&](auto& ts, Json&) {
    weights::NamedTensor* s = find(ts, module_ + ".scales");
    s->tensor = s->tensor.reshape({s->tensor.dim(0) / 2, s->tensor.dim(1) * 2});
  });
  EXPECT_NE(msg.find("tensor '" + module_ + ".scales' has shape"), std::string::npos) << msg;
}

TEST_F(AffineErrors, CodesOfTheWrongWidthForTheConfiguredBits) {
  AffineRecipe recipe{8, 32, {}};
  const std::string msg = load_error(recipe, [&](auto&, Json& config) { config["quantization"]["bits"] = 4; });
  EXPECT_NE(msg.find("has shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST_F(AffineErrors, NanAndInfScales) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string msg = load_error({8, 32, {}}, [&](auto& ts, Json&) {
      weights::NamedTensor* s = find(ts, module_ + ".scales");
      keep_.push_back(Buffer::copy_of(s->tensor));
      keep_.back().tensor().data_as<uint16_t>()[3] = f32_to_bf16(bad);
      s->tensor = keep_.back().tensor();
    });
    EXPECT_NE(msg.find("tensor '" + module_ + ".scales' has " + (std::isnan(bad) ? "nan" : "inf") + " at flat index 3"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  }
}

TEST_F(AffineErrors, NoQuantizationInTheConfig) {
  const std::string msg = load_error({8, 32, {}}, [&](auto&, Json& config) {
    config.erase("quantization");
    config.erase("quantization_config");
  });
  EXPECT_NE(msg.find("config.json has no \"quantization\""), std::string::npos) << msg;
}

TEST_F(AffineErrors, ModuleMarkedUnquantizedButQuantized) {
  const std::string msg = load_error({8, 32, {}}, [&](auto&, Json& config) { config["quantization"][module_] = false; });
  EXPECT_NE(msg.find("keeps '" + module_ + "' unquantized"), std::string::npos) << msg;
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
}

TEST_F(AffineErrors, UnsupportedBitsAndModes) {
  std::string msg = load_error({8, 32, {}}, [&](auto&, Json& config) { config["quantization"]["bits"] = 7; });
  EXPECT_NE(msg.find("7 bits with group size 32 is not supported"), std::string::npos) << msg;
  msg = load_error({8, 32, {}}, [&](auto&, Json& config) { config["quantization"]["mode"] = "mxfp6"; });
  EXPECT_NE(msg.find("quantization mode \"mxfp6\" is not supported (affine, mxfp4, nvfp4, mxfp8)"), std::string::npos) << msg;
}

TEST_F(AffineErrors, ConfigNamesAModuleThatDoesNotExist) {
  const std::string msg = load_error({8, 32, {}}, [&](auto&, Json& config) {
    config["quantization"]["model.language_model.layers.0.mlp.gate_prj"] = Json{{"group_size", 64}, {"bits", 8}};
  });
  EXPECT_NE(msg.find("has an entry for 'model.language_model.layers.0.mlp.gate_prj', but the model loads no weight"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kapitsa::testing
