// FP8 E4M3 checkpoints (models/fp8_weights.h): every E4M3 bit pattern, per-tensor, per-row and 128×128
// block scales (F32 and BF16, "weight_scale" and "weight_scale_inv") dequantize to the values computed
// here from the format's definition; the demo draft converted to block-FP8 by this test loads and
// keeps close to its bf16 logits; missing or misshapen scales and bad configs are errors naming the
// file, the tensor and the problem.
#include "affine_checkpoint.h"
#include "cli_runner.h"
#include "demo_draft.h"
#include "fixture_reference.h"
#include "float_codes.h"
#include "linear_values.h"
#include "model_logits.h"
#include "models/quantization.h"
#include "models/weight_list.h"
#include "test_util.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace kapitsa::testing {
namespace {

Buffer f8(int64_t N, int64_t K, const std::vector<uint8_t>& codes) {
  Buffer b = Buffer::allocate(DType::f8_e4m3, {N, K});
  std::copy(codes.begin(), codes.end(), b.tensor().data_as<uint8_t>());
  return b;
}

Buffer f32(Shape shape, const std::vector<float>& v) {
  Buffer b = Buffer::allocate(DType::f32, shape);
  std::copy(v.begin(), v.end(), b.tensor().data_as<float>());
  return b;
}

// Loads "m.weight" [N, K] from a one-file checkpoint of `tensors` and `config` (a quantization_config).
class Fp8Load : public ::testing::Test {
 protected:
  Expected<Linear> load(const std::vector<weights::NamedTensor>& tensors, int64_t N, int64_t K, const Json& qc = Json()) {
    path_ = dir_.path() + "/m" + std::to_string(files_++) + ".safetensors";  // a new file: the last one stays mapped
    EXPECT_TRUE(weights::write_safetensors(path_, tensors).ok());
    auto ckpt = weights::Checkpoint::open(path_);
    EXPECT_TRUE(ckpt.ok());
    ckpt_ = std::make_unique<weights::Checkpoint>(std::move(*ckpt));
    Json config = Json::object();
    if (!qc.is_null()) config["quantization_config"] = qc;
    auto q = models::parse_quantization(weights::HfConfig::from_json(config, dir_.path() + "/config.json"));
    EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().message);
    loader_ = std::make_unique<models::WeightLoader>(*ckpt_, q.ok() ? *q : models::Quantization{});
    return loader_->linear("m.weight", {N, K});
  }
  // Every value of a loaded weight against `expected(n, k)`: on the cpu, where 32 inputs share a scale,
  // Kapitsa's F8_E4M3_32 blocks (codes as stored, 1.125 bytes a weight) giving the f32 product exactly;
  // else a bf16 copy, the product rounded once to bf16.
  template <class F>
  void expect_values(const Linear& l, int64_t N, int64_t K, F expected) {
    ASSERT_EQ(l.rows(), N);
    ASSERT_EQ(l.cols(), K);
    if (K % 32 == 0) {
      ASSERT_EQ(l.format(), WeightFormat::ggml);
      ASSERT_EQ(l.ggml_type(), GgmlType::f8_e4m3_32);
      EXPECT_EQ(l.nbytes(), static_cast<size_t>(N * K / 32 * 36));
    } else {
      ASSERT_TRUE(l.is_dense());
      ASSERT_EQ(l.weight().dtype(), DType::bf16);
    }
    values_ = testing::linear_values(l);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float want = l.is_dense() ? bf16_to_f32(f32_to_bf16(expected(n, k))) : expected(n, k);
        ASSERT_EQ(values_[static_cast<size_t>(n * K + k)], want) << n << ", " << k;
      }
  }
  std::vector<float> values_;  // of the last expect_values
  ScratchDir dir_;
  std::string path_;
  int files_ = 0;
  std::unique_ptr<weights::Checkpoint> ckpt_;
  std::unique_ptr<models::WeightLoader> loader_;
};

// All 254 finite codes (the two NaN codes replaced by 0) with one per-tensor scale of 0.5; a few by hand:
// 0x38 = 2^0 = 1, 0x7e = 1.75·2^8 = 448 (the largest), 0x01 = 2^-9 (smallest subnormal), 0x08 = 2^-6.
TEST_F(Fp8Load, EveryCodeWithAPerTensorScale) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = (i & 0x7f) == 0x7f ? 0 : uint8_t(i);
  auto l = load({{"m.weight", f8(2, 128, codes)}, {"m.weight_scale", f32({1}, {0.5f})}}, 2, 128);
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(*l, 2, 128, [&](int64_t n, int64_t k) { return e4m3(codes[n * 128 + k]) * 0.5f; });
  const std::vector<float>& w = values_;
  EXPECT_EQ(w[0x38], 0.5f);
  EXPECT_EQ(w[0x7e], 224.0f);
  EXPECT_EQ(w[0xfe], -224.0f);
  EXPECT_EQ(w[0x01], std::ldexp(1.0f, -10));
  EXPECT_EQ(w[0x08], std::ldexp(1.0f, -7));
  EXPECT_EQ(w[0x80], 0.0f);
}

// One scale per row ([N, 1], compressed-tensors' "channel" strategy).
TEST_F(Fp8Load, PerRowScales) {
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(4 * 64);
  for (auto& c : codes) c = uint8_t(rng() % 0x7f) | uint8_t(rng() & 0x80);
  const std::vector<float> s = {0.25f, -3.0f, 1e-3f, 7.5f};
  auto l = load({{"m.weight", f8(4, 64, codes)}, {"m.weight_scale", f32({4, 1}, s)}}, 4, 64);
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(*l, 4, 64, [&](int64_t n, int64_t k) { return e4m3(codes[n * 64 + k]) * s[n]; });
}

// 128×128 blocks with odd tails (N = 200, K = 160: scales [2, 2]), block-FP8's "weight_scale_inv" in
// bf16, and compressed-tensors' block_structure of 64×32 with "weight_scale".
TEST_F(Fp8Load, BlockScalesWithTails) {
  std::mt19937 rng(5);
  const int64_t N = 200, K = 160;
  std::vector<uint8_t> codes(N * K);
  for (auto& c : codes) c = uint8_t(rng() % 0x7f) | uint8_t(rng() & 0x80);
  Buffer s16 = Buffer::allocate(DType::bf16, {2, 2});
  const float sv[4] = {0.5f, 2.0f, -0.125f, 3.0f};
  for (int i = 0; i < 4; ++i) s16.tensor().data_as<uint16_t>()[i] = f32_to_bf16(sv[i]);
  auto l = load({{"m.weight", f8(N, K, codes)}, {"m.weight_scale_inv", s16}}, N, K,
                Json{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(*l, N, K, [&](int64_t n, int64_t k) { return e4m3(codes[n * K + k]) * sv[(n / 128) * 2 + k / 128]; });

  std::vector<float> s(4 * 5);  // ceil(200 / 64) = 4, ceil(160 / 32) = 5
  for (auto& v : s) v = float(rng() % 100) / 64.0f;
  const Json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {64, 32}}};
  const Json ct = {{"quant_method", "compressed-tensors"},
                   {"format", "float-quantized"},
                   {"config_groups", {{"group_0", {{"weights", weights}}}}}};
  l = load({{"m.weight", f8(N, K, codes)}, {"m.weight_scale", f32({4, 5}, s)}}, N, K, ct);
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(*l, N, K, [&](int64_t n, int64_t k) { return e4m3(codes[n * K + k]) * s[(n / 64) * 5 + k / 32]; });
}

TEST_F(Fp8Load, BadScalesAreErrorsNamingFileAndTensor) {
  const std::vector<uint8_t> codes(200 * 160, 0x38);
  auto l = load({{"m.weight", f8(200, 160, codes)}}, 200, 160);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find(path_ + ": tensor 'm.weight' is F8_E4M3 but neither 'm.weight_scale_inv' nor "
                                           "'m.weight_scale' is there"), std::string::npos) << l.error().message;
  l = load({{"m.weight", f8(200, 160, codes)}, {"m.weight_scale_inv", f32({3, 3}, std::vector<float>(9, 1.0f))}}, 200, 160);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find(path_ + ": tensor 'm.weight_scale_inv' has shape [3, 3]; for a weight [200, 160] "
                                           "expected [1] (per tensor), [200, 1] (per row) or [2, 2]"), std::string::npos)
      << l.error().message;
  l = load({{"m.weight", f8(200, 160, codes)},
            {"m.weight_scale_inv", f32({2, 2}, {1.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f, 1.0f})}}, 200, 160);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("tensor 'm.weight_scale_inv' has nan at flat index 1"), std::string::npos)
      << l.error().message;
  l = load({{"m.weight", f8(200, 160, codes)}, {"m.weight_scale", f32({1}, {1.0f})}}, 100, 160);  // the model wants [100, 160]
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("m.weight"), std::string::npos) << l.error().message;
}

// A NaN code (0x7F or 0xFF) is an error naming the file, tensor, row and input: the first one, also when
// it lies past the loader's first million codes (the scan runs in parallel chunks).
TEST_F(Fp8Load, NaNCodesAreErrorsNamingRowAndInput) {
  const int64_t N = 1200, K = 1024;  // 1.2 M codes: two chunks of the scan
  std::vector<uint8_t> codes(static_cast<size_t>(N * K), 0x38);
  codes[static_cast<size_t>(1100 * K + 7)] = 0xFF;
  codes[static_cast<size_t>(1150 * K + 3)] = 0x7F;
  auto l = load({{"m.weight", f8(N, K, codes)}, {"m.weight_scale", f32({1}, {1.0f})}}, N, K);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find(path_ + ": tensor 'm.weight' has a NaN code (E4M3 0xFF) at row 1100, input 7"),
            std::string::npos) << l.error().message;
  codes[static_cast<size_t>(5)] = 0x7F;
  l = load({{"m.weight", f8(N, K, codes)}, {"m.weight_scale", f32({1}, {1.0f})}}, N, K);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("NaN code (E4M3 0x7F) at row 0, input 5"), std::string::npos) << l.error().message;
}

TEST(Fp8Config, MethodsAndBadFields) {
  auto parse = [](const Json& qc) {
    return models::parse_quantization(weights::HfConfig::from_json(Json{{"quantization_config", qc}}, "x/config.json"));
  };
  auto q = parse({{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}});
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(q->fp8);
  EXPECT_EQ(q->fp8->block, (std::array<int64_t, 2>{128, 64}));
  q = parse({{"quant_method", "modelopt"}, {"quant_algo", "FP8"}});
  ASSERT_TRUE(q.ok() && q->fp8);
  EXPECT_FALSE(q->defaults);  // no MLX affine section
  q = parse({{"quant_method", "fp8"}, {"fmt", "e5m2"}});
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("FP8 format \"e5m2\" is not supported"), std::string::npos) << q.error().message;
  q = parse({{"quant_method", "fp8"}, {"weight_block_size", {128}}});
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("x/config.json"), std::string::npos) << q.error().message;
  EXPECT_NE(q.error().message.find("weight_block_size: expected a block size"), std::string::npos) << q.error().message;
  const Json int4 = {{"num_bits", 4}, {"type", "int"}};
  q = parse({{"quant_method", "compressed-tensors"}, {"config_groups", {{"group_0", {{"weights", int4}}}}}});
  ASSERT_FALSE(q.ok());  // int4 compressed-tensors: not loaded
  EXPECT_NE(q.error().message.find("does not load yet"), std::string::npos) << q.error().message;
  q = parse({{"quant_method", "modelopt"}, {"quant_algo", "W4A8_AWQ"}});
  ASSERT_FALSE(q.ok());
}

// The demo draft as a block-FP8 release ships it: every projection F8_E4M3 with a "weight_scale_inv"
// per 128×128 block (amax / 448), embedding and norms bf16. Measured (session 27's draft): relative error
// 3.2e-2, top-1 0.939 (4 of 66 prompt positions differ; counting near ties, model_logits.h, as the test
// does: measured after this run), mean KL 3.0e-3 against bf16.
TEST(Fp8Model, DemoDraftAsBlockFp8) {
  DemoDraft draft = open_demo_draft();
  ASSERT_TRUE(draft.ckpt);
  const std::string& src = draft.dir;
  const FixtureReference& ref = draft.ref;
  const weights::Checkpoint* ckpt = draft.ckpt.get();
  Json* config = &draft.config;
  std::vector<weights::NamedTensor> tensors;
  std::vector<Buffer> keep;
  int converted = 0;
  for (const std::string& name : ckpt->names()) {
    auto t = ckpt->get_any_shape(name);
    if (!t.ok()) continue;  // the vision tower's rank-5 patch embedding: not read by the language model
    if (!is_draft_projection(name, *t)) {
      tensors.push_back({name, *t});
      continue;
    }
    const int64_t N = t->dim(0), K = t->dim(1), bn = (N + 127) / 128, bk = (K + 127) / 128;
    std::vector<float> w(static_cast<size_t>(N * K));
    weights::convert_to_f32(*t, w.data());
    std::vector<float> s(static_cast<size_t>(bn * bk), 0.0f);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) s[(n / 128) * bk + k / 128] = std::max(s[(n / 128) * bk + k / 128], std::fabs(w[n * K + k]));
    for (float& v : s) v = v > 0 ? v / 448.0f : 1.0f;
    std::vector<uint8_t> codes(w.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) codes[n * K + k] = to_e4m3(w[n * K + k] / s[(n / 128) * bk + k / 128]);
    keep.push_back(f8(N, K, codes));
    tensors.push_back({name, keep.back()});
    keep.push_back(f32({bn, bk}, s));
    tensors.push_back({name.substr(0, name.size() - 7) + ".weight_scale_inv", keep.back()});
    ++converted;
  }
  EXPECT_GT(converted, 20);
  (*config)["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                      {"weight_block_size", {128, 128}}};
  ScratchDir dir;
  ASSERT_TRUE(write_checkpoint_folder(dir.path(), tensors, *config).ok());
  const Buffer dense = prompt_logits(src, ref.prompt_ids), q = prompt_logits(dir.path(), ref.prompt_ids);
  ASSERT_FALSE(q.tensor().empty());
  const double e = relative_error(q, dense), top1 = top1_agreement_beyond_ties(q, dense);
  std::printf("demo draft as block-FP8: relative error %.2e, top-1 %.3f (%.3f with near ties), mean KL %.2e\n", e,
              top1_agreement(q, dense), top1, mean_kl(q, dense));
  EXPECT_LE(e, 6e-2);
  EXPECT_GE(top1, 0.88);
  EXPECT_GT(e, 1e-4);  // the FP8 codes are really read (not the bf16 values)
}

}  // namespace
}  // namespace kapitsa::testing
