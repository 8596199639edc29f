// Block floating-point checkpoints (models/block_float.h): NVIDIA ModelOpt NVFP4 and mlx's mxfp4 / nvfp4 /
// mxfp8 modes. Every E2M1 and E4M3 code with scales at the extremes (largest, subnormal, zero, negative)
// dequantizes to the value computed here from the formats' definitions (float_codes.h); mxfp4 becomes
// llama.cpp MXFP4 blocks whose ref decoding gives those values; the demo draft quantized by this test to
// each format loads and stays close to its bf16 logits; missing, misshapen and non-finite scales, biases
// where a mode has none and unknown configs are errors naming the file, the tensor and the problem.
#include "affine_checkpoint.h"
#include "cli_runner.h"
#include "demo_draft.h"
#include "fixture_reference.h"
#include "float_codes.h"
#include "linear_values.h"
#include "model_logits.h"
#include "models/quantization.h"
#include "models/weight_list.h"
#include "ops/ref/ref.h"
#include "test_util.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <random>

namespace kapitsa::testing {
namespace {

template <class T>
Buffer filled(DType dt, Shape shape, const std::vector<T>& v) {
  Buffer b = Buffer::allocate(dt, shape);
  EXPECT_EQ(b.tensor().nbytes(), v.size() * sizeof(T));
  std::memcpy(b.tensor().data(), v.data(), v.size() * sizeof(T));
  return b;
}

// 4-bit codes of a row-major [rows, K] matrix packed as the definition says: input 2i in the low nibble of
// byte i (ModelOpt's U8 [rows, K/2]).
std::vector<uint8_t> pack_nibbles(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> b(codes.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(codes[2 * i] | (codes[2 * i + 1] << 4));
  return b;
}
// mlx's U32 words: code j of a word in bits [bits·j, bits·(j + 1)).
std::vector<uint32_t> pack_words(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint32_t> w(codes.size() * bits / 32, 0);
  for (size_t i = 0; i < codes.size(); ++i) w[i * bits / 32] |= uint32_t(codes[i]) << (i * bits % 32);
  return w;
}

// Loads "m.weight" of logical shape `shape` from a one-file checkpoint of `tensors` with config.json `config`.
class BlockFloatLoad : public ::testing::Test {
 protected:
  Expected<Linear> load(const std::vector<weights::NamedTensor>& tensors, Shape shape, const Json& config) {
    path_ = dir_.path() + "/m" + std::to_string(files_++) + ".safetensors";  // a new file: the last one stays mapped
    EXPECT_TRUE(weights::write_safetensors(path_, tensors).ok());
    auto ckpt = weights::Checkpoint::open(path_);
    EXPECT_TRUE(ckpt.ok());
    ckpt_ = std::make_unique<weights::Checkpoint>(std::move(*ckpt));
    auto q = models::parse_quantization(weights::HfConfig::from_json(config, dir_.path() + "/config.json"));
    if (!q.ok()) return q.error();
    loader_ = std::make_unique<models::WeightLoader>(*ckpt_, *q);
    return loader_->linear("m.weight", shape);
  }
  // Every value of a loaded weight [N, K] against `expected(n, k)`: on the cpu with K % 32 == 0,
  // Kapitsa's blocks of `blocks` type (codes as stored, f32 scales) giving the f32 value exactly; else a
  // bf16 copy, the value rounded once to bf16.
  void expect_values(const Linear& l, int64_t N, int64_t K, const std::function<float(int64_t, int64_t)>& expected,
                     GgmlType blocks) {
    ASSERT_EQ(l.rows(), N);
    ASSERT_EQ(l.cols(), K);
    if (K % 32 == 0) {
      ASSERT_EQ(l.format(), WeightFormat::ggml);
      ASSERT_EQ(l.ggml_type(), blocks);
      EXPECT_EQ(l.nbytes(), static_cast<size_t>(N * K / 32 * ggml_type_info(static_cast<uint32_t>(blocks))->block_bytes));
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
  std::string error_of(const Expected<Linear>& l) { return l.ok() ? std::string("(loaded)") : l.error().message; }
  ScratchDir dir_;
  std::string path_;
  int files_ = 0;
  std::unique_ptr<weights::Checkpoint> ckpt_;
  std::unique_ptr<models::WeightLoader> loader_;
};

const Json kModelopt = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}}}};
Json mlx_mode(const char* mode, int group, int bits) {
  return {{"quantization", {{"group_size", group}, {"bits", bits}, {"mode", mode}}}};
}

// 16 E4M3 scale codes: the largest (±448), the smallest subnormal (2^-9), zero and −0, 1, and others.
const std::vector<uint8_t> kE4m3Scales = {0x7E, 0xFE, 0x01, 0x00, 0x80, 0x38, 0x08, 0x07,
                                          0x3C, 0xB0, 0x50, 0x21, 0x66, 0x12, 0xC3, 0x44};
// N = 4 rows of K = 64: each group of 16 holds every E2M1 code once (in a different order per group).
constexpr int64_t kN = 4, kK = 64;
std::vector<uint8_t> every_e2m1_per_group() {
  std::vector<uint8_t> c(kN * kK);
  for (int64_t i = 0; i < kN * kK; ++i) c[i] = uint8_t(((i % 16) * 5 + i / 16) % 16);
  return c;
}

TEST_F(BlockFloatLoad, ModeloptNvfp4EveryCodeAndExtremeScales) {
  const std::vector<uint8_t> codes = every_e2m1_per_group();
  for (float g : {0.5f, 1.0f / 3.0f}) {
    auto l = load({{"m.weight", filled(DType::u8, {kN, kK / 2}, pack_nibbles(codes))},
                   {"m.weight_scale", filled(DType::f8_e4m3, {kN, kK / 16}, kE4m3Scales)},
                   {"m.weight_scale_2", filled(DType::f32, {}, std::vector<float>{g})},
                   {"m.input_scale", filled(DType::f32, {}, std::vector<float>{7.0f})}},  // ignored (weight-only)
                  {kN, kK}, kModelopt);
    ASSERT_TRUE(l.ok()) << l.error().message;
    // The blocks keep scale · g as one f32 per 16 inputs: the value is code · (scale · g).
    expect_values(
        *l, kN, kK, [&](int64_t n, int64_t k) { return e2m1(codes[n * kK + k]) * (e4m3(kE4m3Scales[n * 4 + k / 16]) * g); },
        GgmlType::fp4_e2m1_32);
  }
  // By hand, with g = 0.5: row 0's group 0 has scale 448: code 7 (6) → 1344, code 15 → −1344; group 2
  // (2^-9): code 1 (0.5) → 2^-11; group 3 (scale 0): 0 for every code.
  auto l = load({{"m.weight", filled(DType::u8, {kN, kK / 2}, pack_nibbles(codes))},
                 {"m.weight_scale", filled(DType::f8_e4m3, {kN, kK / 16}, kE4m3Scales)},
                 {"m.weight_scale_2", filled(DType::f32, {1}, std::vector<float>{0.5f})}},
                {kN, kK}, kModelopt);
  ASSERT_TRUE(l.ok()) << l.error().message;
  const std::vector<float> v = testing::linear_values(*l);
  const auto at = [&](int64_t k) { return v[static_cast<size_t>(k)]; };
  for (int64_t k = 0; k < 16; ++k) {
    if (codes[k] == 7) EXPECT_EQ(at(k), 1344.0f);  // 6 · 448 · 0.5
    if (codes[k] == 15) EXPECT_EQ(at(k), -1344.0f);
    if (codes[32 + k] == 1) EXPECT_EQ(at(32 + k), std::ldexp(1.0f, -11));  // 0.5 · 2^-9 · 0.5
    EXPECT_EQ(at(48 + k), 0.0f);
  }
}

TEST_F(BlockFloatLoad, MlxNvfp4AndMxfp8EveryCode) {
  std::vector<uint8_t> codes = every_e2m1_per_group();
  auto l = load({{"m.weight", filled(DType::u32, {kN, kK / 8}, pack_words(codes, 4))},
                 {"m.scales", filled(DType::u8, {kN, kK / 16}, kE4m3Scales)}},
                {kN, kK}, mlx_mode("nvfp4", 16, 4));
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(
      *l, kN, kK, [&](int64_t n, int64_t k) { return e2m1(codes[n * kK + k]) * e4m3(kE4m3Scales[n * 4 + k / 16]); },
      GgmlType::fp4_e2m1_32);

  // mxfp8: every finite E4M3 code (the two NaN codes replaced by 0) with E8M0 scales 2^-127 (code 0) … 2^73.
  const int64_t N = 2, K = 128;
  codes.assign(N * K, 0);
  for (int i = 0; i < 256; ++i) codes[i] = (i & 0x7f) == 0x7f ? 0 : uint8_t(i);
  const std::vector<uint8_t> e8 = {0, 1, 127, 128, 100, 200, 126, 3};  // [2, 4]
  l = load({{"m.weight", filled(DType::u32, {N, K / 4}, pack_words(codes, 8))}, {"m.scales", filled(DType::u8, {N, K / 32}, e8)}},
           {N, K}, mlx_mode("mxfp8", 32, 8));
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_values(
      *l, N, K, [&](int64_t n, int64_t k) { return e4m3(codes[n * K + k]) * e8m0(e8[n * 4 + k / 32]); },
      GgmlType::f8_e4m3_32);
  // By hand: value i has code i, scale e8[i / 32]: 0x38 (1) · 2^-126, 0x7E (448) · 2^1, 0xFE (−448) · 2^-124.
  const auto at = [&](int64_t i) { return values_[static_cast<size_t>(i)]; };
  EXPECT_EQ(at(0x38), std::ldexp(1.0f, -126));
  EXPECT_EQ(at(0x7E), 896.0f);
  EXPECT_EQ(at(0xFE), -448.0f * std::ldexp(1.0f, -124));
}

// mxfp4 is repacked into llama.cpp MXFP4 blocks: ref's decoding of each row gives e2m1 · 2^(e − 127), exactly
// (also for e = 0, 2^-127, and fused expert stacks [E, N, K]).
TEST_F(BlockFloatLoad, MlxMxfp4BecomesGgmlBlocksWithTheSameValues) {
  const int64_t E = 2, N = 3, K = 64;
  std::vector<uint8_t> codes(E * N * K), e8(E * N * K / 32);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 7 + i / 32) % 16);
  const uint8_t extremes[] = {0, 1, 126, 127, 128, 150, 200, 90, 60, 130, 127, 0};
  for (size_t i = 0; i < e8.size(); ++i) e8[i] = extremes[i];
  auto l = load({{"m.weight", filled(DType::u32, {E, N, K / 8}, pack_words(codes, 4))},
                 {"m.scales", filled(DType::u8, {E, N, K / 32}, e8)}},
                {E, N, K}, mlx_mode("mxfp4", 32, 4));
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_EQ(l->format(), WeightFormat::ggml);
  ASSERT_EQ(l->ggml_type(), GgmlType::mxfp4);
  EXPECT_EQ(l->nbytes(), size_t(E * N * K / 32 * 17));  // 4.25 bits per weight
  std::vector<float> row(K);
  for (int64_t e = 0; e < E; ++e) {
    const Linear x = l->expert(e);
    for (int64_t n = 0; n < N; ++n) {
      ops::ref::dequantize_row(x, n, row.data());
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = (e * N + n) * K + k;
        ASSERT_EQ(row[k], e2m1(codes[i]) * e8m0(e8[i / 32])) << e << ", " << n << ", " << k;
      }
    }
  }
}

TEST_F(BlockFloatLoad, BadScalesAreErrorsNamingFileTensorAndProblem) {
  const std::vector<uint8_t> codes = pack_nibbles(every_e2m1_per_group());
  const auto w = filled(DType::u8, {kN, kK / 2}, codes);
  const auto s = filled(DType::f8_e4m3, {kN, kK / 16}, kE4m3Scales);
  const auto g = filled(DType::f32, {}, std::vector<float>{1.0f});
  auto expect_error = [&](const Expected<Linear>& l, std::initializer_list<std::string> parts) {
    const std::string msg = error_of(l);
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
  };
  // ModelOpt NVFP4.
  auto l = load({{"m.weight", w}, {"m.weight_scale", s}}, {kN, kK}, kModelopt);
  expect_error(l, {path_, "'m.weight' is NVFP4", "'m.weight_scale_2' is missing"});
  l = load({{"m.weight", w}, {"m.weight_scale_2", g}}, {kN, kK}, kModelopt);
  expect_error(l, {path_, "'m.weight_scale' is missing"});
  l = load({{"m.weight", w}, {"m.weight_scale", filled(DType::f8_e4m3, {kN, kK / 32}, std::vector<uint8_t>(8, 0x38))},
            {"m.weight_scale_2", g}}, {kN, kK}, kModelopt);
  expect_error(l, {path_, "tensor 'm.weight_scale' has shape [4, 2], expected [4, 4]"});
  std::vector<uint8_t> nan_scales = kE4m3Scales;
  nan_scales[5] = 0x7F;
  l = load({{"m.weight", w}, {"m.weight_scale", filled(DType::f8_e4m3, {kN, kK / 16}, nan_scales)}, {"m.weight_scale_2", g}},
           {kN, kK}, kModelopt);
  expect_error(l, {path_, "tensor 'm.weight_scale' has nan at flat index 5"});
  l = load({{"m.weight", w}, {"m.weight_scale", s}, {"m.weight_scale_2", filled(DType::f32, {}, std::vector<float>{INFINITY})}},
           {kN, kK}, kModelopt);
  expect_error(l, {path_, "tensor 'm.weight_scale_2' has inf at flat index 0"});
  l = load({{"m.weight", w}, {"m.weight_scale", s}, {"m.weight_scale_2", filled(DType::f32, {2}, std::vector<float>{1, 2})}},
           {kN, kK}, kModelopt);
  expect_error(l, {path_, "tensor 'm.weight_scale_2' has shape [2]; expected one value"});
  l = load({{"m.weight", w}, {"m.weight_scale", s}, {"m.weight_scale_2", g}}, {kN, 2 * kK}, kModelopt);
  expect_error(l, {path_, "tensor 'm.weight' has shape [4, 32], expected [4, 64]"});
  Json excluded = kModelopt;
  excluded["quantization_config"]["ignore"] = {"lm_head", "m*"};
  l = load({{"m.weight", w}, {"m.weight_scale", s}, {"m.weight_scale_2", g}}, {kN, kK}, excluded);
  expect_error(l, {path_, "'m.weight' is stored as NVFP4", "config.json", "excludes 'm'", "pattern 'm*'"});

  // mlx modes.
  const auto words = filled(DType::u32, {kN, kK / 8}, pack_words(every_e2m1_per_group(), 4));
  l = load({{"m.weight", words}}, {kN, kK}, mlx_mode("mxfp4", 32, 4));
  expect_error(l, {path_, "'m.weight' is packed (U32) but 'm.scales' is missing"});
  l = load({{"m.weight", words}, {"m.scales", filled(DType::u8, {kN, 4}, std::vector<uint8_t>(16, 127))}}, {kN, kK},
           mlx_mode("mxfp4", 32, 4));
  expect_error(l, {path_, "tensor 'm.scales' has shape [4, 4], expected [4, 2]"});
  std::vector<uint8_t> e8(8, 127);
  e8[3] = 0xFF;
  l = load({{"m.weight", words}, {"m.scales", filled(DType::u8, {kN, 2}, e8)}}, {kN, kK}, mlx_mode("mxfp4", 32, 4));
  expect_error(l, {path_, "tensor 'm.scales' has a scale that is not finite (E8M0 code 0xFF) at flat index 3"});
  l = load({{"m.weight", words}, {"m.scales", filled(DType::u8, {kN, 4}, nan_scales)}}, {kN, kK}, mlx_mode("nvfp4", 16, 4));
  expect_error(l, {path_, "tensor 'm.scales' has a scale that is not finite (E4M3 code 0x7F) at flat index 5"});
  l = load({{"m.weight", words}, {"m.scales", filled(DType::u8, {kN, 2}, std::vector<uint8_t>(8, 127))},
            {"m.biases", filled(DType::f32, {kN, 2}, std::vector<float>(8, 0.0f))}},
           {kN, kK}, mlx_mode("mxfp4", 32, 4));
  expect_error(l, {path_, "tensor 'm.biases' is there, but mode \"mxfp4\" has no biases"});
}

TEST_F(BlockFloatLoad, ConfigsAndTheirErrors) {
  auto parse = [&](const Json& config) {
    return models::parse_quantization(weights::HfConfig::from_json(config, dir_.path() + "/config.json"));
  };
  auto expect_error = [](const Expected<models::Quantization>& q, std::initializer_list<std::string> parts) {
    ASSERT_FALSE(q.ok());
    for (const std::string& p : parts) EXPECT_NE(q.error().message.find(p), std::string::npos) << q.error().message;
  };
  expect_error(parse(mlx_mode("mxfp6", 32, 4)), {"config.json", "quantization mode \"mxfp6\" is not supported"});
  expect_error(parse(mlx_mode("mxfp4", 32, 8)), {"config.json", "mode \"mxfp4\" has 4 bits and group size 32, got 8 bits"});
  expect_error(parse(mlx_mode("nvfp4", 32, 4)), {"mode \"nvfp4\" has 4 bits and group size 16"});
  Json per_module = mlx_mode("mxfp4", 32, 4);  // an entry without "mode" has the default's: 8 bits is wrong for mxfp4
  per_module["quantization"]["m.gate"] = {{"group_size", 32}, {"bits", 8}};
  expect_error(parse(per_module), {"entry 'm.gate'", "mode \"mxfp4\" has 4 bits"});
  per_module["quantization"]["m.gate"] = {{"group_size", 64}, {"bits", 8}, {"mode", "affine"}};
  auto q = parse(per_module);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->modules.at("m.gate")->mode, "affine");
  EXPECT_EQ(q->defaults->mode, "mxfp4");
  expect_error(parse({{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "W4A8_AWQ"}}}}),
               {"config.json", "quant_method \"modelopt\" (W4A8_AWQ)", "does not load yet"});
  expect_error(parse({{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 32}}}}),
               {"config.json", "NVFP4 group_size 32 is not supported"});
  q = parse({{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "nvfp4"}, {"ignore", {"lm_head"}}}}});
  ASSERT_TRUE(q.ok() && q->nvfp4) << (q.ok() ? "" : q.error().message);
  EXPECT_EQ(q->nvfp4->exclude, std::vector<std::string>{"lm_head"});

  // hf_quant_config.json beside a config.json without quantization_config (ModelOpt's own file).
  std::ofstream(dir_.path() + "/hf_quant_config.json")
      << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16,
             "exclude_modules": ["lm_head", "model.layers.0.mlp.gate*"]}})";
  q = parse(Json::object());
  ASSERT_TRUE(q.ok() && q->nvfp4) << (q.ok() ? "" : q.error().message);
  EXPECT_EQ(q->nvfp4->exclude.size(), 2u);
  EXPECT_NE(q->nvfp4->where.find("hf_quant_config.json"), std::string::npos);
  std::ofstream(dir_.path() + "/hf_quant_config.json") << R"({"quantization": {"quant_algo": "INT4_AWQ"}})";
  expect_error(parse(Json::object()), {"hf_quant_config.json", "(INT4_AWQ)", "does not load yet"});
  std::ofstream(dir_.path() + "/hf_quant_config.json") << R"({"producer": {}})";
  expect_error(parse(Json::object()), {"hf_quant_config.json: field 'quantization' is missing"});
  std::ofstream(dir_.path() + "/hf_quant_config.json") << R"({"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}})";
  expect_error(parse(Json::object()), {"hf_quant_config.json", "exclude_modules: expected a list"});
}

// The demo draft quantized by this test as each format (every projection; embedding and norms bf16), from
// the definitions: NVFP4 per 16 inputs with scale = amax/6 as E4M3 (ModelOpt: divided by the per-tensor
// weight_scale_2 = amax/(6·448) first), MX per 32 with scale 2^ceil(log2(amax/max code)), codes the
// nearest. Each loads and its prompt logits stay near the bf16 draft's. Measured (session 27's draft, top-1
// counting near ties, model_logits.h): ModelOpt NVFP4 1.1e-1 / top-1 0.894, mlx nvfp4 1.2e-1 / 0.864,
// mxfp4 1.6e-1 / 0.879, mxfp8 3.1e-2 / 0.970.
struct Quantized {
  std::vector<weights::NamedTensor> tensors;
  std::vector<Buffer> keep;
};

Quantized quantize_draft(const weights::Checkpoint& ckpt, const std::string& format) {
  Quantized out;
  for (const std::string& name : ckpt.names()) {
    auto t = ckpt.get_any_shape(name);
    if (!t.ok()) continue;  // the vision tower's rank-5 patch embedding: not read by the language model
    if (!is_draft_projection(name, *t)) {
      out.tensors.push_back({name, *t});
      continue;
    }
    const std::string module = name.substr(0, name.size() - 7);
    const int64_t N = t->dim(0), K = t->dim(1);
    std::vector<float> w(static_cast<size_t>(N * K));
    weights::convert_to_f32(*t, w.data());
    const bool nv = format != "mxfp8" && format != "mxfp4";
    const int64_t group = nv ? 16 : 32;
    float tensor_amax = 0;
    for (float v : w) tensor_amax = std::max(tensor_amax, std::fabs(v));
    const float global = format == "modelopt" ? tensor_amax / (6.0f * 448.0f) : 1.0f;
    std::vector<uint8_t> codes(w.size()), scales(w.size() / group);
    for (size_t g = 0; g < scales.size(); ++g) {
      float amax = 0;
      for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(w[g * group + i]));
      const float max_code = format == "mxfp8" ? 448.0f : 6.0f;
      float s;
      if (nv) {
        scales[g] = to_e4m3(amax / 6.0f / global);
        s = e4m3(scales[g]) * global;
      } else {
        const int e = amax > 0 ? int(std::ceil(std::log2(amax / max_code))) : -127;
        scales[g] = uint8_t(std::clamp(e + 127, 0, 254));
        s = e8m0(scales[g]);
      }
      for (int64_t i = 0; i < group; ++i) {
        const float x = s == 0 ? 0.0f : w[g * group + i] / s;
        codes[g * group + i] = format == "mxfp8" ? to_e4m3(x) : to_e2m1(x);
      }
    }
    if (format == "modelopt") {
      out.keep.push_back(filled(DType::u8, {N, K / 2}, pack_nibbles(codes)));
      out.tensors.push_back({name, out.keep.back()});
      out.keep.push_back(filled(DType::f8_e4m3, {N, K / 16}, scales));
      out.tensors.push_back({module + ".weight_scale", out.keep.back()});
      out.keep.push_back(filled(DType::f32, {}, std::vector<float>{global}));
      out.tensors.push_back({module + ".weight_scale_2", out.keep.back()});
    } else {
      const int bits = format == "mxfp8" ? 8 : 4;
      out.keep.push_back(filled(DType::u32, {N, K * bits / 32}, pack_words(codes, bits)));
      out.tensors.push_back({name, out.keep.back()});
      out.keep.push_back(filled(DType::u8, {N, K / group}, scales));
      out.tensors.push_back({module + ".scales", out.keep.back()});
    }
  }
  return out;
}

TEST(BlockFloatModel, DemoDraftInEachFormat) {
  const DemoDraft draft = open_demo_draft();
  ASSERT_TRUE(draft.ckpt);
  int64_t dense_bytes = 0;
  const Buffer dense = prompt_logits(draft.dir, draft.ref.prompt_ids, &dense_bytes);
  struct Case {
    const char* format;
    Json quantization;
    double max_error, min_top1;
  };
  const Case cases[] = {
      {"modelopt", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}}, 0.2, 0.8},
      {"nvfp4", {{"group_size", 16}, {"bits", 4}, {"mode", "nvfp4"}}, 0.2, 0.8},
      {"mxfp4", {{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}}, 0.2, 0.8},
      {"mxfp8", {{"group_size", 32}, {"bits", 8}, {"mode", "mxfp8"}}, 6e-2, 0.93},
  };
  for (const Case& c : cases) {
    Quantized q = quantize_draft(*draft.ckpt, c.format);
    Json cfg = draft.config;
    cfg[std::string(c.format) == "modelopt" ? "quantization_config" : "quantization"] = c.quantization;
    ScratchDir dir;
    ASSERT_TRUE(write_checkpoint_folder(dir.path(), q.tensors, cfg).ok());
    int64_t bytes = 0;
    const Buffer logits = prompt_logits(dir.path(), draft.ref.prompt_ids, &bytes);
    ASSERT_FALSE(logits.tensor().empty()) << c.format;
    const double e = relative_error(logits, dense), top1 = top1_agreement_beyond_ties(logits, dense);
    std::printf("demo draft as %s: relative error %.2e, top-1 %.3f (%.3f with near ties), mean KL %.2e, resident weights "
                "%.2f of bf16\n",
                c.format, e, top1_agreement(logits, dense), top1, mean_kl(logits, dense), double(bytes) / double(dense_bytes));
    EXPECT_LE(e, c.max_error) << c.format;
    EXPECT_GE(top1, c.min_top1) << c.format;
    EXPECT_GT(e, 1e-4) << c.format;  // the quantized codes are really read (not the bf16 values)
    if (std::string(c.format) == "mxfp4") EXPECT_LT(bytes, dense_bytes) << "mxfp4 stays packed";
  }
}

}  // namespace
}  // namespace kapitsa::testing
