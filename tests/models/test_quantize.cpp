// kapitsa quantize (models/quantize_checkpoint.h, models/affine_quantize.h): known groups quantized to
// the codes, scales and biases that mlx's affine formula gives (worked out by hand here, and the
// formula restated independently below for random groups); folders written from the demo model's
// draft and the fixtures load with Kapitsa's MLX loader and stay close to the bf16 logits; the files
// and config are mlx-lm's (which modules, routers at 8 bits, mixed recipes); a multi-token-prediction
// head is kept, quantized, in model-mtp.safetensors; bad input is an error.
#include "base/json.h"
#include "cli_runner.h"
#include "fixture_reference.h"
#include "model_logits.h"
#include "models/affine_quantize.h"
#include "models/mtp_fixture.h"
#include "models/quantize_checkpoint.h"
#include "test_util.h"
#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace kapitsa::testing {
namespace {

namespace fs = std::filesystem;
using models::affine_quantize;

// Code k of a row, read bit by bit from the packed words (bit k·bits + j is bit j of the code).
uint32_t code_at(const uint32_t* row_words, int64_t k, int bits) {
  uint32_t q = 0;
  for (int j = 0; j < bits; ++j) {
    const int64_t at = k * bits + j;
    q |= ((row_words[at / 32] >> (at % 32)) & 1u) << j;
  }
  return q;
}

Buffer f32_row(const std::vector<float>& v) {
  Buffer b = Buffer::allocate(DType::f32, {1, static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), b.tensor().data_as<float>());
  return b;
}

// 0, 1, …, 31 at 5 bits: max has the larger magnitude, so the edge is 31 with a negative scale; q0 =
// rint(31 / −1) = −31, scale = 31 / −31 = −1, bias = 31, and w = 31 − q: code k is 31 − k, exact.
TEST(AffineQuantize, KnownGroupWithPositiveEdge) {
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[i] = float(i);
  auto q = affine_quantize(f32_row(v), 5, 32);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->codes.tensor().shape(), (Shape{1, 5}));
  EXPECT_EQ(q->scales.tensor().data_as<float>()[0], -1.0f);
  EXPECT_EQ(q->biases.tensor().data_as<float>()[0], 31.0f);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(code_at(q->codes.tensor().data_as<uint32_t>(), k, 5), uint32_t(31 - k)) << k;
}

// −3 … 0.75 in steps of 0.25 (16 values) then 0.5 repeated, at 4 bits: |min| > |max|, so scale =
// (0.75 + 3) / 15 = 0.25, edge −3, q0 = −12, scale = −3 / −12 = 0.25, bias = −3; w = −3 + 0.25·q.
// An all-zero group: scale −1e-7 (max((0 − 0)/15, 1e-7), negated), q0 = 0, so bias 0 and codes 0.
TEST(AffineQuantize, KnownGroupWithNegativeEdgeAndZeroGroup) {
  std::vector<float> v(64, 0.0f);
  for (int i = 0; i < 32; ++i) v[i] = i < 16 ? -3.0f + 0.25f * float(i) : 0.5f;
  auto q = affine_quantize(f32_row(v), 4, 32);
  ASSERT_TRUE(q.ok()) << q.error().message;
  const float* s = q->scales.tensor().data_as<float>();
  const float* b = q->biases.tensor().data_as<float>();
  EXPECT_EQ(s[0], 0.25f);
  EXPECT_EQ(b[0], -3.0f);
  EXPECT_EQ(s[1], -1e-7f);
  EXPECT_EQ(b[1], 0.0f);
  const uint32_t* words = q->codes.tensor().data_as<uint32_t>();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(code_at(words, k, 4), uint32_t(k < 16 ? k : 14)) << k;
  for (int k = 32; k < 64; ++k) EXPECT_EQ(code_at(words, k, 4), 0u) << k;
  // 4-bit codes are nibbles: code 1 is bits 4..7 of the first word
  EXPECT_EQ(words[0] & 0xffu, 0x10u);
}

// Random rows at every bits × group size, bf16 input: scales and biases come back as bf16 of the
// formula's values (restated here), every code is the formula's, and scale·q + bias is within half a
// step of w (plus the bf16 rounding of scale and bias, and the part of [min, max] the range misses).
TEST(AffineQuantize, RandomGroupsFollowTheFormula) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int gs : {32, 64, 128}) {
      const int64_t N = 3, K = 256;
      Buffer w = Buffer::allocate(DType::bf16, {N, K});
      std::vector<float> x(static_cast<size_t>(N * K));
      for (size_t i = 0; i < x.size(); ++i) {
        w.tensor().data_as<uint16_t>()[i] = f32_to_bf16(normal(rng) + (i % 97 == 0 ? 0.3f : 0.0f));
        x[i] = bf16_to_f32(w.tensor().data_as<uint16_t>()[i]);
      }
      auto q = affine_quantize(w, bits, gs);
      ASSERT_TRUE(q.ok()) << q.error().message;
      ASSERT_EQ(q->scales.tensor().dtype(), DType::bf16);
      ASSERT_EQ(q->codes.tensor().shape(), (Shape{N, K * bits / 32}));
      const float n = float((1 << bits) - 1);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t g = 0; g < K / gs; ++g) {
          const float* v = x.data() + r * K + g * gs;
          float lo = v[0], hi = v[0];
          for (int i = 0; i < gs; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
          float scale = std::max((hi - lo) / n, 1e-7f), edge = hi, bias = 0;
          if (std::fabs(lo) > std::fabs(hi)) edge = lo;
          else scale = -scale;
          const float q0 = std::rint(edge / scale);
          if (q0 != 0) scale = edge / q0, bias = edge;
          const int64_t at = r * (K / gs) + g;
          ASSERT_EQ(q->scales.tensor().data_as<uint16_t>()[at], f32_to_bf16(scale)) << bits << " " << gs;
          ASSERT_EQ(q->biases.tensor().data_as<uint16_t>()[at], f32_to_bf16(bias)) << bits << " " << gs;
          const float s16 = bf16_to_f32(f32_to_bf16(scale)), b16 = bf16_to_f32(f32_to_bf16(bias));
          const uint32_t* row = q->codes.tensor().data_as<uint32_t>() + r * K * bits / 32;
          for (int i = 0; i < gs; ++i) {
            const uint32_t c = code_at(row, g * gs + i, bits);
            ASSERT_EQ(c, uint32_t(std::clamp(std::rint((v[i] - bias) / scale), 0.0f, n))) << bits << " " << gs << " " << i;
            // within half a step of w, or of the end of the range [bias, bias + n·scale] when w is past it
            // (scale = edge / q0 can make that range a little narrower than [min, max] at few bits)
            const float r0 = std::min(bias, bias + n * scale), r1 = std::max(bias, bias + n * scale);
            const float outside = std::max({0.0f, r0 - v[i], v[i] - r1});
            ASSERT_LE(std::fabs(s16 * float(c) + b16 - v[i]),
                      outside + std::fabs(scale) * 0.5f + std::fabs(scale) * n * 8e-3f + std::fabs(bias) * 8e-3f + 1e-6f);
          }
        }
    }
}

TEST(AffineQuantize, RejectsUnsupportedParameters) {
  Buffer w = Buffer::zeros(DType::f32, {2, 96});
  EXPECT_FALSE(affine_quantize(w, 7, 32).ok());
  EXPECT_FALSE(affine_quantize(w, 4, 48).ok());
  EXPECT_FALSE(affine_quantize(w, 4, 64).ok());  // 96 is not a multiple of 64
}

Json read_config(const std::string& dir) {
  auto j = read_json_file((fs::path(dir) / "config.json").string());
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json();
}

// The demo model's draft (hidden 128, MLP 320, vocab 16384, tied embedding) at 8 and 4 bits, group 64:
// the folder is mlx-lm's (codes, scales, biases, config keys, tokenizer copied, norms and conv1d
// untouched), loads, and its logits stay close to the bf16 draft's. Measured (session 27's draft): 8-bit
// relative error 9.6e-3, top-1 0.970 (1.000 counting near ties, model_logits.h); 4-bit 1.3e-1, 0.833
// (0.894) (the draft is a 4-layer model with flatter logits than the target's: docs/quantization.md has
// the target's figures).
TEST(QuantizeCheckpoint, DemoDraftLoadsAndStaysClose) {
  const std::string src = test_data_path("../models/demo/draft");
  FixtureReference ref = load_fixture_reference(src);
  const Buffer dense = prompt_logits(src, ref.prompt_ids);
  double e8 = 0;
  for (int bits : {8, 4}) {
    ScratchDir dir;
    const std::string out = dir.path() + "/q";
    auto summary = models::quantize_checkpoint(src, out, {bits, 64, "", {}, {}});
    ASSERT_TRUE(summary.ok()) << summary.error().message;
    EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));
    EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
    const Json config = read_config(out);
    EXPECT_EQ(config["quantization"], (Json{{"group_size", 64}, {"bits", bits}, {"mode", "affine"}}));
    EXPECT_EQ(config["quantization_config"], config["quantization"]);
    auto ckpt = weights::Checkpoint::open(out);
    ASSERT_TRUE(ckpt.ok());
    const std::string layer = "model.language_model.layers.0.";
    EXPECT_EQ(ckpt->find("model.language_model.embed_tokens.weight")->dtype, DType::u32);
    EXPECT_EQ(ckpt->find("model.language_model.embed_tokens.scales")->dtype, DType::bf16);
    EXPECT_EQ(ckpt->find(layer + "mlp.gate_proj.weight")->shape, (std::vector<int64_t>{320, 128 * bits / 32}));
    EXPECT_EQ(ckpt->find(layer + "mlp.down_proj.weight")->dtype, DType::u32);
    EXPECT_EQ(ckpt->find(layer + "input_layernorm.weight")->dtype, DType::bf16);
    EXPECT_EQ(ckpt->find(layer + "linear_attn.conv1d.weight")->dtype, DType::bf16);
    EXPECT_FALSE(ckpt->contains(layer + "input_layernorm.scales"));
    const Buffer q = prompt_logits(out, ref.prompt_ids);
    ASSERT_FALSE(q.tensor().empty());
    const double e = relative_error(q, dense), top1 = top1_agreement_beyond_ties(q, dense);
    std::printf("demo draft %d-bit: relative error %.2e, top-1 %.3f (%.3f with near ties), mean KL %.2e, %.3f bits per weight\n",
                bits, e, top1_agreement(q, dense), top1, mean_kl(q, dense), summary->bits_per_weight);
    if (bits == 8) {
      e8 = e;
      EXPECT_LE(e, 2e-2);
      EXPECT_GE(top1, 0.97);
    } else {
      EXPECT_LE(e, 0.2);
      EXPECT_GE(top1, 0.8);
      EXPECT_GT(e, 2 * e8);  // the 4-bit codes are really read
    }
  }
}

// Group 128: the MLP's down_proj (input 320, not a multiple of 128) stays dense, as mlx-lm leaves it.
TEST(QuantizeCheckpoint, InputsNotAMultipleOfTheGroupStayDense) {
  ScratchDir dir;
  const std::string out = dir.path() + "/q";
  ASSERT_TRUE(models::quantize_checkpoint(test_data_path("../models/demo/draft"), out, {4, 128, "", {}, {}}).ok());
  auto ckpt = weights::Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->find("model.language_model.layers.0.mlp.down_proj.weight")->dtype, DType::bf16);
  EXPECT_EQ(ckpt->find("model.language_model.layers.0.mlp.up_proj.weight")->dtype, DType::u32);
  auto model = models::load_model(out);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
}

// The MoE fixtures: routers as mlx-lm's Qwen models want them (8 bits, group 64, a per-module entry);
// Nemotron-H's router (a bare parameter in mlx-lm) kept dense; every folder loads and keeps close to
// the bf16 logits at 8 bits. Random-weight fixtures, whose outputs move ~10× more than their weights
// (test_affine_model): measured (this commit, 64 tokens) relative error 0.34 / 0.31 / 0.20 and top-1
// 0.67 / 0.59 / 0.92 for qwen35-moe / qwen3-next / nemotron-h.
TEST(QuantizeCheckpoint, FixturesLoadWithMlxLmRouters) {
  struct Case {
    const char* path;
    const char* router;  // a router module
    bool router_quantized;
  };
  for (const Case& c : {Case{"fixtures/qwen35-moe-tiny", "model.language_model.layers.0.mlp.gate", true},
                        Case{"fixtures/qwen3-next-tiny", "model.layers.0.mlp.gate", true},
                        Case{"fixtures/nemotron-h-tiny", nullptr, false}}) {
    const std::string src = test_data_path(c.path);
    FixtureReference ref = load_fixture_reference(src);
    ScratchDir dir;
    const std::string out = dir.path() + "/q";
    auto summary = models::quantize_checkpoint(src, out, {8, 32, "", {}, {}});
    ASSERT_TRUE(summary.ok()) << summary.error().message;
    const Json q = read_config(out)["quantization"];
    auto ckpt = weights::Checkpoint::open(out);
    ASSERT_TRUE(ckpt.ok());
    if (c.router) {
      EXPECT_EQ(q[c.router], (Json{{"group_size", 64}, {"bits", 8}})) << c.path;
      EXPECT_TRUE(ckpt->contains(std::string(c.router) + ".scales")) << c.path;
    }
    for (const std::string& name : ckpt->names())
      if (name.find("mixer.gate.") != std::string::npos) {
        EXPECT_NE(ckpt->find(name)->dtype, DType::u32) << name;
      }
    const std::span<const int32_t> ids(ref.prompt_ids.data(), std::min<size_t>(ref.prompt_ids.size(), 64));
    const Buffer dense = prompt_logits(src, ids), l8 = prompt_logits(out, ids);
    ASSERT_FALSE(l8.tensor().empty()) << c.path;
    std::printf("%s 8-bit: relative error %.2e, top-1 %.3f\n", c.path, relative_error(l8, dense), top1_agreement(l8, dense));
    EXPECT_LE(relative_error(l8, dense), 0.45) << c.path;
    EXPECT_GE(top1_agreement(l8, dense), 0.5) << c.path;
  }
}

// mixed_4_6 on the demo draft (4 layers: num_layers / 8 = 0, so layers 0..3 get 6 bits where
// (i − 0) % 3 == 2 or i ≥ 7·4/8 = 3: layers 2 and 3): v_proj / down_proj of those layers at 6 bits,
// everything else at 4, each with its own entry, and the folder loads.
TEST(QuantizeCheckpoint, MixedRecipe) {
  ScratchDir dir;
  const std::string out = dir.path() + "/q";
  const std::string src = test_data_path("../models/demo/draft");
  auto summary = models::quantize_checkpoint(src, out, {0, 64, "mixed_4_6", {}, {}});
  ASSERT_TRUE(summary.ok()) << summary.error().message;
  const Json q = read_config(out)["quantization"];
  EXPECT_EQ(q["bits"], 4);
  const std::string p = "model.language_model.layers.";
  auto bits_of = [&](const std::string& m) { return q.contains(m) ? q[m]["bits"].get<int>() : -1; };
  EXPECT_EQ(bits_of(p + "0.mlp.down_proj"), 4);
  EXPECT_EQ(bits_of(p + "1.mlp.down_proj"), 4);
  EXPECT_EQ(bits_of(p + "2.mlp.down_proj"), 6);
  EXPECT_EQ(bits_of(p + "3.mlp.down_proj"), 6);
  EXPECT_EQ(bits_of(p + "3.self_attn.v_proj"), 6);
  EXPECT_EQ(bits_of(p + "3.self_attn.q_proj"), 4);
  EXPECT_EQ(bits_of("model.language_model.embed_tokens"), 4);
  EXPECT_EQ(q[p + "0.mlp.down_proj"]["mode"], "affine");
  auto ckpt = weights::Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->find(p + "3.mlp.down_proj.weight")->shape[1], 320 * 6 / 32);
  FixtureReference ref = load_fixture_reference(src);
  const std::span<const int32_t> ids(ref.prompt_ids.data(), std::min<size_t>(ref.prompt_ids.size(), 16));
  const Buffer dense = prompt_logits(src, ids), mixed = prompt_logits(out, ids);
  ASSERT_FALSE(mixed.tensor().empty());
  EXPECT_GE(top1_agreement(mixed, dense), 0.8);
}

// An MTP head (Qwen3.5's random one on qwen35-dense-tiny, Nemotron 3's on nemotron-h-tiny) is quantized by
// the trunk's rules into model-mtp.safetensors: projections as codes, norms and Nemotron's router kept,
// the index listing the file; the folder loads with the head, whose output over the fixture's prompt
// stays close to the bf16 head's at 8 bits. Measured (this commit): output rows relative error 6.5e-3
// (Qwen3.5, a fresh random head each run) and 7.6e-3 (Nemotron 3).
TEST(QuantizeCheckpoint, KeepsTheMtpHead) {
  ScratchDir dir;
  struct Case {
    std::string folder, fixture, projection, kept;
  };
  const std::string qwen = fixture_with_mtp("qwen35-dense-tiny", dir.path("qwen"));
  const std::string nemotron = nemotron_with_mtp(dir.path("nemotron"));
  for (const Case& c : {Case{qwen, "qwen35-dense-tiny", "mtp.fc", "mtp.pre_fc_norm_hidden.weight"},
                        Case{nemotron, "nemotron-h-tiny", "mtp.layers.0.eh_proj", "mtp.layers.1.mixer.gate.weight"}}) {
    SCOPED_TRACE(c.fixture);
    const std::string out = c.folder + "-q8";
    auto summary = models::quantize_checkpoint(c.folder, out, {8, 32, "", {}, {}});
    ASSERT_TRUE(summary.ok()) << summary.error().message;
    EXPECT_EQ(summary->shards, 1);
    auto head = weights::Checkpoint::open(out + "/model-mtp.safetensors");
    ASSERT_TRUE(head.ok()) << head.error().message;
    EXPECT_EQ(head->find(c.projection + ".weight")->dtype, DType::u32);
    EXPECT_TRUE(head->contains(c.projection + ".scales"));
    EXPECT_NE(head->find(c.kept)->dtype, DType::u32);
    for (const std::string& name : head->names()) EXPECT_EQ(name.rfind("mtp.", 0), 0u) << name;
    std::ifstream index(out + "/model.safetensors.index.json");
    const Json map = Json::parse(index)["weight_map"];
    EXPECT_EQ(map[c.projection + ".weight"], "model-mtp.safetensors");
    const HeadRows dense = head_over_prompt(c.folder, c.fixture), q8 = head_over_prompt(out, c.fixture);
    ASSERT_FALSE(dense.rows.tensor().empty() || q8.rows.tensor().empty());
    const double e = relative_error(q8.rows, dense.rows);
    std::printf("%s MTP head at 8 bits: output rows relative error %.2e\n", c.fixture.c_str(), e);
    EXPECT_LE(e, 5e-2);
    EXPECT_GT(e, 0.0);  // the head's codes are what ran
  }
}

TEST(QuantizeCheckpoint, BadInputIsAnError) {
  ScratchDir dir;
  const std::string src = test_data_path("../models/demo/draft");
  auto message = [](const Expected<models::QuantizeSummary>& r) { return r.ok() ? std::string("ok") : r.error().message; };
  std::string m = message(models::quantize_checkpoint(dir.path() + "/missing", dir.path() + "/a", {4, 64, "", {}, {}}));
  EXPECT_NE(m.find("missing: no such folder"), std::string::npos) << m;
  m = message(models::quantize_checkpoint(src, dir.path() + "/a", {7, 64, "", {}, {}}));
  EXPECT_NE(m.find("7 bits"), std::string::npos) << m;
  m = message(models::quantize_checkpoint(src, dir.path() + "/a", {4, 48, "", {}, {}}));
  EXPECT_NE(m.find("group size 48"), std::string::npos) << m;
  m = message(models::quantize_checkpoint(src, dir.path() + "/a", {0, 64, "mixed_5_7", {}, {}}));
  EXPECT_NE(m.find("unknown recipe"), std::string::npos) << m;
  m = message(models::quantize_checkpoint(src, dir.path(), {4, 64, "", {}, {}}));
  EXPECT_NE(m.find("already exists"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir.path() + "/a"));  // nothing written on a refused run
  // a folder already quantized: refused by its config, and by its tensors when the config was edited
  ASSERT_TRUE(models::quantize_checkpoint(src, dir.path() + "/q", {8, 64, "", {}, {}}).ok());
  m = message(models::quantize_checkpoint(dir.path() + "/q", dir.path() + "/qq", {4, 64, "", {}, {}}));
  EXPECT_NE(m.find("already quantized (\"quantization\""), std::string::npos) << m;
  Json config = read_config(dir.path() + "/q");
  config.erase("quantization"), config.erase("quantization_config");
  std::ofstream(dir.path() + "/q/config.json") << config.dump();
  m = message(models::quantize_checkpoint(dir.path() + "/q", dir.path() + "/qq", {4, 64, "", {}, {}}));
  EXPECT_NE(m.find("model.safetensors: tensor '"), std::string::npos) << m;
  EXPECT_NE(m.find("is already quantized ("), std::string::npos) << m;
  // the CLI: the same message and exit code 1; no --bits is a usage error
  CommandResult r = run_kapitsa("quantize " + dir.path() + "/missing " + dir.path() + "/b --bits 4 --quiet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("kapitsa quantize: " + dir.path() + "/missing: no such folder"), std::string::npos) << r.output;
  r = run_kapitsa("quantize " + src + " " + dir.path() + "/b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--bits is required"), std::string::npos) << r.output;
}

// The table of docs/quantization.md: the demo draft (the bf16 demo model) per bits and recipe, group 64, against
// its bf16 folder on its reference prompt. Not run by ctest (a few seconds per row):
//   build/release/tests/test_models --gtest_also_run_disabled_tests --gtest_filter='*QuantizationTable*'
TEST(QuantizeCheckpoint, DISABLED_QuantizationTable) {
  const std::string src = test_data_path("../models/demo/draft");
  FixtureReference ref = load_fixture_reference(src);
  int64_t dense_bytes = 0;
  const Buffer dense = prompt_logits(src, ref.prompt_ids, &dense_bytes);
  struct Row {
    int bits;
    const char* mixed;
  };
  for (const Row& row : {Row{8, ""}, Row{6, ""}, Row{5, ""}, Row{4, ""}, Row{3, ""}, Row{2, ""}, Row{0, "mixed_4_6"},
                         Row{0, "mixed_3_6"}, Row{0, "mixed_2_6"}}) {
    ScratchDir dir;
    auto s = models::quantize_checkpoint(src, dir.path() + "/q", {row.bits, 64, row.mixed, {}, {}});
    ASSERT_TRUE(s.ok()) << s.error().message;
    int64_t bytes = 0;
    const Buffer q = prompt_logits(dir.path() + "/q", ref.prompt_ids, &bytes);
    std::printf("| %s | %.2f | %.2f | %.2e | %.2e | %.3f |\n",
                row.mixed[0] ? row.mixed : (std::to_string(row.bits) + "-bit").c_str(), s->bits_per_weight,
                double(bytes) / double(dense_bytes), relative_error(q, dense), mean_kl(q, dense), top1_agreement(q, dense));
  }
}

}  // namespace
}  // namespace kapitsa::testing
