// Tests of llama.cpp's block types (WeightFormat::ggml): ref's dequantization of hand-built blocks
// whose values are computed here from the block layouts (logical codes first, then packed into the
// bytes by a packer written from ggml-common.h's struct definitions and quantize_row_q4_K's scale
// packing: extreme codes, negative and zero scales, every fifth / sixth bit set on its own; MXFP4's
// values from the E2M1 / E8M0 bit definitions); then the
// cpu backend against ref on fresh random blocks (matmul and embedding), and its int8-activation GEMV
// (both dot-product sequences) within the bound its rounding of x allows. Values on real files made by
// llama.cpp are compared with gguf-py's dequantization in tests/weights/test_gguf.cpp.
#include "ggml_blocks.h"
#include "op_test_helpers.h"
#include "ops/cpu/cpu.h"
#include "ops/ref/ref.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kapitsa::ops {
namespace {
using test::Rng;

void put_f16(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(b.data() + at, &h, 2);
}

// Codes for a block of n values: every value 0..max appears, in a scrambled order.
std::vector<int> codes(int n, int max, int salt) {
  std::vector<int> q(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) q[static_cast<size_t>(i)] = (i * 7 + salt) % (max + 1);
  q[0] = max, q[static_cast<size_t>(n - 1)] = 0;
  return q;
}

std::vector<float> dequant(GgmlType type, const std::vector<uint8_t>& block, int64_t K) {
  std::vector<float> out(static_cast<size_t>(K));
  ref::dequantize_ggml(type, block.data(), K, out.data());
  return out;
}

void expect_values(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-7) << what << " value " << i;
}

TEST(Ggml, Q8_0HandBuilt) {
  std::vector<uint8_t> b(34);
  put_f16(b, 0, -0.5f);
  const int8_t q[32] = {-128, -1, 0, 1, 127, 5, -5, 64};
  std::memcpy(b.data() + 2, q, 32);
  std::vector<double> want(32);
  for (int j = 0; j < 32; ++j) want[static_cast<size_t>(j)] = -0.5 * q[j];
  expect_values(dequant(GgmlType::q8_0, b, 32), want, "Q8_0");
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: value j < 16 in the low nibble of qs[j], value j + 16 in its high
// nibble; the fifth bit of value j is bit j of the u32 qh.
TEST(Ggml, Q4Q5LegacyHandBuilt) {
  for (GgmlType type : {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1}) {
    const bool five = type == GgmlType::q5_0 || type == GgmlType::q5_1;
    const bool has_min = type == GgmlType::q4_1 || type == GgmlType::q5_1;
    const auto info = *ggml_type_info(static_cast<uint32_t>(type));
    std::vector<uint8_t> b(static_cast<size_t>(info.block_bytes), 0);
    const float d = 0.25f, m = -3.0f;
    put_f16(b, 0, d);
    if (has_min) put_f16(b, 2, m);
    const size_t qh_at = has_min ? 4 : 2, qs_at = qh_at + (five ? 4 : 0);
    const std::vector<int> q = codes(32, five ? 31 : 15, 3);
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) {
      const int nib = q[static_cast<size_t>(j)] & 0xF;
      b[qs_at + static_cast<size_t>(j % 16)] |= static_cast<uint8_t>(j < 16 ? nib : nib << 4);
      if (q[static_cast<size_t>(j)] & 16) qh |= 1u << j;
    }
    if (five) std::memcpy(b.data() + qh_at, &qh, 4);
    const int centre = has_min ? 0 : (five ? 16 : 8);
    std::vector<double> want(32);
    for (int j = 0; j < 32; ++j)
      want[static_cast<size_t>(j)] = d * (q[static_cast<size_t>(j)] - centre) + (has_min ? m : 0.0);
    expect_values(dequant(type, b, 32), want, info.name.data());
  }
}

// The 12 scale bytes of Q4_K / Q5_K from 8 six-bit scales and mins, packed as quantize_row_q4_K does.
void pack_k4_scales(const int* sc, const int* mn, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each; values 64c..64c+31 in the low
// nibbles of qs[32c..32c+31], values 64c+32.. in the high nibbles; the fifth bit of value 64c + l
// (+32) is bit 2c (2c + 1) of qh[l]. w = d·sc·q − dmin·m.
TEST(Ggml, Q4KQ5KHandBuilt) {
  for (GgmlType type : {GgmlType::q4_k, GgmlType::q5_k}) {
    const bool five = type == GgmlType::q5_k;
    std::vector<uint8_t> b(five ? 176 : 144, 0);
    const float d = 0.125f, dmin = 0.5f;
    put_f16(b, 0, d), put_f16(b, 2, dmin);
    const int sc[8] = {63, 0, 1, 17, 32, 48, 5, 60}, mn[8] = {0, 63, 2, 40, 16, 33, 62, 1};
    pack_k4_scales(sc, mn, b.data() + 4);
    const std::vector<int> q = codes(256, five ? 31 : 15, 1);
    const size_t qs_at = five ? 48 : 16;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int lo = q[static_cast<size_t>(64 * c + l)], hi = q[static_cast<size_t>(64 * c + 32 + l)];
        b[qs_at + static_cast<size_t>(32 * c + l)] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        if (five) {
          if (lo & 16) b[16 + static_cast<size_t>(l)] |= static_cast<uint8_t>(1 << (2 * c));
          if (hi & 16) b[16 + static_cast<size_t>(l)] |= static_cast<uint8_t>(1 << (2 * c + 1));
        }
      }
    std::vector<double> want(256);
    for (int i = 0; i < 256; ++i)
      want[static_cast<size_t>(i)] = static_cast<double>(d) * sc[i / 32] * q[static_cast<size_t>(i)] - static_cast<double>(dmin) * mn[i / 32];
    expect_values(dequant(type, b, 256), want, five ? "Q5_K" : "Q4_K");
  }
}

// Q6_K: ql[128], qh[64], 16 int8 scales, d. In half h (128 values), value 128h + 32i + l (i < 4, l < 32)
// takes its low 4 bits from ql[64h + l] (i = 0, 2: low / high nibble) or ql[64h + 32 + l] (i = 1, 3), its
// top 2 bits from bits 2i..2i+1 of qh[32h + l]; w = d · scale[(value / 16)] · (q − 32).
TEST(Ggml, Q6KHandBuilt) {
  std::vector<uint8_t> b(210, 0);
  const float d = -0.0625f;
  put_f16(b, 208, d);
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(j % 2 ? -128 + 9 * j : 127 - 11 * j);
  scales[5] = 0;
  std::memcpy(b.data() + 192, scales, 16);
  const std::vector<int> q = codes(256, 63, 5);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i)
      for (int l = 0; l < 32; ++l) {
        const int v = q[static_cast<size_t>(128 * h + 32 * i + l)];
        const size_t ql_at = static_cast<size_t>(64 * h + (i % 2) * 32 + l);
        b[ql_at] |= static_cast<uint8_t>(i < 2 ? (v & 0xF) : (v & 0xF) << 4);
        b[128 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>((v >> 4) << (2 * i));
      }
  std::vector<double> want(256);
  for (int i = 0; i < 256; ++i) want[static_cast<size_t>(i)] = static_cast<double>(d) * scales[i / 16] * (q[static_cast<size_t>(i)] - 32);
  expect_values(dequant(GgmlType::q6_k, b, 256), want, "Q6_K");
}

// Q2_K {scales[16]; qs[64]; d; dmin}: 16 sub-blocks of 16, scales[i] = scale (low nibble) | min << 4.
// Value 128h + 32j + l (j < 4, l < 32) is bits 2j..2j+1 of qs[32h + l]; w = d·sc·q − dmin·m.
TEST(Ggml, Q2KHandBuilt) {
  std::vector<uint8_t> b(84, 0);
  const float d = 0.25f, dmin = -0.5f;  // a negative dmin: the stored f16 sign is used as is
  put_f16(b, 80, d), put_f16(b, 82, dmin);
  int sc[16], mn[16];
  for (int i = 0; i < 16; ++i) sc[i] = (i * 5 + 3) % 16, mn[i] = (i * 11 + 15) % 16;
  sc[2] = 0, sc[9] = 15, mn[4] = 0, mn[7] = 15;
  for (int i = 0; i < 16; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(sc[i] | (mn[i] << 4));
  const std::vector<int> q = codes(256, 3, 2);
  for (int i = 0; i < 256; ++i)
    b[16 + static_cast<size_t>(32 * (i / 128) + i % 32)] |= static_cast<uint8_t>(q[static_cast<size_t>(i)] << (2 * (i % 128 / 32)));
  std::vector<double> want(256);
  for (int i = 0; i < 256; ++i)
    want[static_cast<size_t>(i)] = static_cast<double>(d) * sc[i / 16] * q[static_cast<size_t>(i)] - static_cast<double>(dmin) * mn[i / 16];
  expect_values(dequant(GgmlType::q2_k, b, 256), want, "Q2_K");
}

// Q3_K {hmask[32]; qs[64]; scales[12]; d}: signed 3-bit codes q in −4..3 stored as q + 4: low 2 bits
// as Q2_K, bit 2 in bit 4h + j of hmask[l] (value 128h + 32j + l); 16 six-bit scales stored + 32,
// low 4 bits in the low (i < 8) or high nibble of scales[i % 8], top 2 bits at bit 2(i / 4) of
// scales[8 + i % 4]; w = d·(s − 32)·q.
TEST(Ggml, Q3KHandBuilt) {
  std::vector<uint8_t> b(110, 0);
  const float d = -0.125f;
  put_f16(b, 108, d);
  int s[16];
  for (int i = 0; i < 16; ++i) s[i] = (i * 13 + 7) % 64;
  s[0] = 0, s[5] = 63, s[10] = 32;  // scale −32, +31 and 0
  for (int i = 0; i < 16; ++i) {
    b[96 + static_cast<size_t>(i % 8)] |= static_cast<uint8_t>((s[i] & 0xF) << (i < 8 ? 0 : 4));
    b[104 + static_cast<size_t>(i % 4)] |= static_cast<uint8_t>((s[i] >> 4) << (2 * (i / 4)));
  }
  const std::vector<int> u = codes(256, 7, 4);  // q + 4
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, j = i % 128 / 32, l = i % 32, v = u[static_cast<size_t>(i)];
    b[32 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>((v & 3) << (2 * j));
    if (v & 4) b[static_cast<size_t>(l)] |= static_cast<uint8_t>(1 << (4 * h + j));
  }
  std::vector<double> want(256);
  for (int i = 0; i < 256; ++i) want[static_cast<size_t>(i)] = static_cast<double>(d) * (s[i / 16] - 32) * (u[static_cast<size_t>(i)] - 4);
  expect_values(dequant(GgmlType::q3_k, b, 256), want, "Q3_K");
}

// IQ4_NL / IQ4_XS: a nibble (laid out as Q4_0's) indexes ggml's non-uniform levels. IQ4_NL {d; qs[16]}:
// w = d·level. IQ4_XS {d; scales_h u16; scales_l[4]; qs[128]}: 8 sub-blocks of 32 laid out as IQ4_NL
// blocks, six-bit scale i = nibble i % 2 of scales_l[i / 2] | bits 2i..2i+1 of scales_h << 4, stored
// + 32: w = d·(s − 32)·level.
TEST(Ggml, Iq4HandBuilt) {
  constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  {
    std::vector<uint8_t> b(18, 0);
    const float d = -0.03125f;
    put_f16(b, 0, d);
    const std::vector<int> q = codes(32, 15, 6);
    for (int j = 0; j < 32; ++j) b[2 + static_cast<size_t>(j % 16)] |= static_cast<uint8_t>(q[static_cast<size_t>(j)] << (j < 16 ? 0 : 4));
    std::vector<double> want(32);
    for (int j = 0; j < 32; ++j) want[static_cast<size_t>(j)] = static_cast<double>(d) * kLevels[q[static_cast<size_t>(j)]];
    expect_values(dequant(GgmlType::iq4_nl, b, 32), want, "IQ4_NL");
  }
  std::vector<uint8_t> b(136, 0);
  const float d = 0.0625f;
  put_f16(b, 0, d);
  const int s[8] = {0, 63, 32, 1, 47, 16, 33, 62};
  uint16_t scales_h = 0;
  for (int i = 0; i < 8; ++i) {
    b[4 + static_cast<size_t>(i / 2)] |= static_cast<uint8_t>((s[i] & 0xF) << (4 * (i % 2)));
    scales_h |= static_cast<uint16_t>((s[i] >> 4) << (2 * i));
  }
  std::memcpy(b.data() + 2, &scales_h, 2);
  const std::vector<int> q = codes(256, 15, 9);
  for (int i = 0; i < 256; ++i)
    b[8 + static_cast<size_t>(16 * (i / 32) + i % 16)] |= static_cast<uint8_t>(q[static_cast<size_t>(i)] << (i % 32 < 16 ? 0 : 4));
  std::vector<double> want(256);
  for (int i = 0; i < 256; ++i) want[static_cast<size_t>(i)] = static_cast<double>(d) * (s[i / 32] - 32) * kLevels[q[static_cast<size_t>(i)]];
  expect_values(dequant(GgmlType::iq4_xs, b, 256), want, "IQ4_XS");
}

// MXFP4 (OCP MX v1.0) {e; qs[16]}: nibbles laid out as Q4_0's, each an FP4 E2M1 number — bit 3 the sign,
// bits 1..2 the exponent E, bit 0 the mantissa M: (E == 0 ? M/2 : (1 + M/2)·2^(E−1)) — times the E8M0
// scale 2^(e − 127). Computed here in double from the bits; every value is exact in f32, including
// the subnormal ones of e = 0 and 1.
TEST(Ggml, Mxfp4HandBuilt) {
  for (int e : {0, 1, 100, 126, 127, 128, 140, 250}) {
    std::vector<uint8_t> b(17, 0);
    b[0] = static_cast<uint8_t>(e);
    const std::vector<int> q = codes(32, 15, e);
    for (int j = 0; j < 32; ++j) b[1 + static_cast<size_t>(j % 16)] |= static_cast<uint8_t>(q[static_cast<size_t>(j)] << (j < 16 ? 0 : 4));
    const std::vector<float> got = dequant(GgmlType::mxfp4, b, 32);
    for (int j = 0; j < 32; ++j) {
      const int v = q[static_cast<size_t>(j)], E = (v >> 1) & 3, M = v & 1;
      const double mag = E == 0 ? M / 2.0 : (1 + M / 2.0) * std::ldexp(1.0, E - 1);
      const double want = (v & 8 ? -mag : mag) * std::ldexp(1.0, e - 127);
      ASSERT_EQ(got[static_cast<size_t>(j)], static_cast<float>(want)) << "e=" << e << " value " << j << " code " << v;
    }
  }
}

// Kapitsa's F8_E4M3_32 {float d; q[32]} (FP8 checkpoints kept as stored on the cpu): every one of the
// 254 finite E4M3 codes — bit 7 the sign, bits 3..6 the exponent E (bias 7), bits 0..2 the mantissa M:
// (E == 0 ? M/8 · 2^−6 : (1 + M/8) · 2^(E−7)) — computed here in double from the bits, times scales
// from 2^-20 to 2^20 with odd mantissas; the f32 product rounded once is what both decoders give.
TEST(Ggml, F8E4m3BlocksHandBuilt) {
  for (float d : {1.0f, 0.3f, -1.7e-6f, 9.1e5f}) {
    std::vector<int> finite;
    for (int c = 0; c < 256; ++c)
      if ((c & 0x7F) != 0x7F) finite.push_back(c);
    const int64_t K = static_cast<int64_t>((finite.size() + 31) / 32 * 32);
    std::vector<uint8_t> b(static_cast<size_t>(K / 32 * 36), 0);
    for (int64_t i = 0; i < K; ++i) {
      uint8_t* blk = b.data() + (i / 32) * 36;
      std::memcpy(blk, &d, 4);
      blk[4 + i % 32] = static_cast<uint8_t>(finite[static_cast<size_t>(i) % finite.size()]);
    }
    const std::vector<float> got = dequant(GgmlType::f8_e4m3_32, b, K);
    for (int64_t i = 0; i < K; ++i) {
      const int c = finite[static_cast<size_t>(i) % finite.size()], E = (c >> 3) & 15, M = c & 7;
      const double mag = E == 0 ? M / 8.0 * std::ldexp(1.0, -6) : (1 + M / 8.0) * std::ldexp(1.0, E - 7);
      const double want = (c & 0x80 ? -mag : mag) * static_cast<double>(d);
      ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(want)) << "code 0x" << std::hex << c << " d " << d;
    }
  }
}

// Kapitsa's FP4_E2M1_32 {float d[2]; qs[16]} (NVFP4 on the cpu): input 2i in the low nibble of byte i,
// 2i + 1 in the high one (NVFP4's own order, unlike MXFP4's), d[0] for inputs 0-15, d[1] for 16-31.
TEST(Ggml, Fp4E2m1BlocksHandBuilt) {
  const float d[2] = {0.75f, -3.0e-3f};
  const std::vector<int> q = codes(32, 15, 7);
  std::vector<uint8_t> b(24, 0);
  std::memcpy(b.data(), d, 8);
  for (int j = 0; j < 32; ++j) b[8 + static_cast<size_t>(j / 2)] |= static_cast<uint8_t>(q[static_cast<size_t>(j)] << (4 * (j % 2)));
  const std::vector<float> got = dequant(GgmlType::fp4_e2m1_32, b, 32);
  for (int j = 0; j < 32; ++j) {
    const int v = q[static_cast<size_t>(j)], E = (v >> 1) & 3, M = v & 1;
    const double mag = E == 0 ? M / 2.0 : (1 + M / 2.0) * std::ldexp(1.0, E - 1);
    const double want = (v & 8 ? -mag : mag) * static_cast<double>(d[j / 16]);
    ASSERT_EQ(got[static_cast<size_t>(j)], static_cast<float>(want)) << "value " << j << " code " << v;
  }
}

TEST(Ggml, UnsupportedTypeIsRefusedByLinear) {
  std::vector<uint8_t> b(66);  // one IQ2_XXS block: a type ref does not decode
  EXPECT_DEATH((void)Linear::ggml(Tensor(DType::u8, {1, 66}, b.data()), GgmlType::iq2_xxs, 256), "IQ2_XXS");
}

bool on_cuda(const BackendTable& b) { return b.name == std::string_view("cuda"); }

// The cuda backend's int8-activation GEMV (kernels.h): Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS for
// at most 32 tokens (over 8 in chunks: kChunkedGemvMaxTokens, ops/cuda/matmul.cpp), x rounded per block of
// these inputs as the cpu backend rounds it.
int64_t cuda_int8_block(GgmlType t, int64_t tokens) {
  if (tokens > 32) return 0;
  if (t == GgmlType::q8_0 || t == GgmlType::q4_0 || t == GgmlType::iq4_nl) return 32;
  if (t == GgmlType::q4_k || t == GgmlType::q6_k || t == GgmlType::q5_k || t == GgmlType::iq4_xs) return 256;
  return 0;
}

using test::int8_rounding_bound;
using test::random_blocks;

constexpr GgmlType kTypes[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0,   GgmlType::q5_1,
                               GgmlType::q8_0, GgmlType::q2_k, GgmlType::q3_k,   GgmlType::q4_k,
                               GgmlType::q5_k, GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs,
                               GgmlType::mxfp4, GgmlType::f8_e4m3_32, GgmlType::fp4_e2m1_32};

// Every backend against ref on fresh random blocks: matmul for several token counts (relative to
// Σ|x·w| per output: f32 accumulation against ref's f64; plus the int8 rounding bound where the cpu or
// cuda backend rounds x to int8, or cuda's prefill bound) and embedding rows (each value within 1e-6 of
// its row's largest: the cpu decoder computes scale·q + offset, ref ggml's own order of operations).
TEST_P(OnBackend, GgmlMatmulAndEmbeddingMatchRef) {
  const std::optional<cpu::Level> level = cpu::level_of(backend());
  if (!level && !on_cuda(backend())) GTEST_SKIP() << backend().name << " has no kernels for llama.cpp block weights yet";
  Rng r;
  SCOPED_TRACE(r.trace());
  for (GgmlType type : kTypes) {
    const auto info = *ggml_type_info(static_cast<uint32_t>(type));
    const int64_t N = 1 + static_cast<int64_t>(r.gen() % 23), K = 256 * (1 + static_cast<int64_t>(r.gen() % 2));
    std::vector<uint8_t> bytes = random_blocks(r, type, N, K);
    const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), type, K);
    for (int64_t T : {1, 3, 9, 17, 40}) {  // 17, 40: the packed prefill GEMM on cpu for types without int8
      SCOPED_TRACE(fmt::format("{} T={} N={} K={}", info.name, T, N, K));
      Buffer x = test::random_f32(r, {T, K});
      Buffer yr = Buffer::zeros(DType::f32, {T, N}), yc = Buffer::allocate(DType::f32, {T, N});
      test::run(test::ref(), matmul, x, w, yr);
      test::run(backend(), matmul, x, w, yc);
      std::vector<float> row(static_cast<size_t>(K));
      const int64_t int8_block = level ? (KAPITSA_CPU_AT(*level, ggml_int8_activations)(type, T)
                                              ? KAPITSA_CPU_AT(*level, ggml_int8_block)(type) : 0)
                                       : cuda_int8_block(type, T);
      for (int64_t n = 0; n < N; ++n) {
        ref::dequantize_row(w, n, row.data());
        for (int64_t t = 0; t < T; ++t) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k) mag += std::abs(static_cast<double>(x.f32()[t * K + k]) * row[static_cast<size_t>(k)]);
          const double rounding = int8_block > 0 ? int8_rounding_bound(x.f32() + t * K, row.data(), K, int8_block)
                                                 : test::cuda_prefill_bound(backend(), T, mag);
          ASSERT_NEAR(yc.f32()[t * N + n], yr.f32()[t * N + n], rounding + 2e-6 * mag + 1e-7) << "t=" << t << " n=" << n;
        }
      }
    }
    std::vector<int32_t> ids = {0, static_cast<int32_t>(N - 1), static_cast<int32_t>(N / 2)};
    Buffer er = Buffer::zeros(DType::f32, {3, K}), ec = Buffer::zeros(DType::f32, {3, K});
    test::run(test::ref(), embedding, w, ids, er);
    test::run(backend(), embedding, w, ids, ec);
    for (int64_t t = 0; t < 3; ++t) {
      float amax = 0;  // values near 0 come from d·sc·q − dmin·m cancelling: bound by the row's scale
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(er.f32()[t * K + k]));
      for (int64_t k = 0; k < K; ++k)
        ASSERT_NEAR(ec.f32()[t * K + k], er.f32()[t * K + k], 1e-6 * amax) << info.name << " embedding " << t << ", " << k;
    }
  }
}

// cuda's prefill (over 32 tokens) dequantizes a weight in chunks of at most 32M values (ops/cuda/matmul.cpp):
// a Q4_K matrix of 8193–8199 rows × 4096 takes two, the second of 1–7 rows. Rows on both sides of the seam and
// a random sample, against the exact sum (f64) within the prefill bound and f32 accumulation.
TEST_P(OnBackend, GgmlPrefillAcrossDequantizationChunks) {
  if (!on_cuda(backend())) GTEST_SKIP() << "the cuda backend's chunking";
  Rng r;
  SCOPED_TRACE(r.trace());
  const int64_t N = 8193 + static_cast<int64_t>(r.gen() % 7), K = 4096, T = 33;
  std::vector<uint8_t> bytes = random_blocks(r, GgmlType::q4_k, N, K);
  const auto info = *ggml_type_info(static_cast<uint32_t>(GgmlType::q4_k));
  const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), GgmlType::q4_k, K);
  Buffer x = test::random_f32(r, {T, K});
  Buffer y = Buffer::allocate(DType::f32, {T, N});
  test::run(backend(), matmul, x, w, y);
  std::vector<int64_t> rows = {0, 8191, 8192, N - 1};
  for (int i = 0; i < 40; ++i) rows.push_back(static_cast<int64_t>(r.gen() % static_cast<uint64_t>(N)));
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n : rows) {
    ref::dequantize_row(w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0, exact = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(x.f32()[t * K + k]) * row[static_cast<size_t>(k)];
        mag += std::abs(p), exact += p;
      }
      ASSERT_NEAR(y.f32()[t * N + n], exact, test::cuda_prefill_bound(backend(), T, mag) + 2e-6 * mag + 1e-7)
          << "t=" << t << " n=" << n;
    }
  }
}

// Each row of a matmul over 2–8 tokens (cuda: 2–12) equals, bit for bit, the same token's row alone (what speculative
// verification needs; test_affine.cpp says why), for the types the cpu decodes per token at that count:
// the int8-activation ones and Kapitsa's float blocks (on cuda: its int8 types and the float blocks). K = 288
// gives Q8_0 a block count (9) that is not a multiple of its accumulation chains.
TEST_P(OnBackend, GgmlRowsOfSeveralTokensEqualEachTokenAlone) {
  if (!cpu::level_of(backend()) && !on_cuda(backend())) GTEST_SKIP() << "a property of the cpu and cuda kernels";
  Rng r;
  SCOPED_TRACE(r.trace());
  const std::optional<cpu::Level> level = cpu::level_of(backend());
  for (GgmlType type : kTypes)
    for (int64_t K : {256, 288, 1024}) {
      const auto info = *ggml_type_info(static_cast<uint32_t>(type));
      if (K % info.block_size != 0) continue;
      const bool per_token = ggml_type_internal(type) ||
                             (level ? KAPITSA_CPU_AT(*level, ggml_int8_block)(type) > 0 : cuda_int8_block(type, 8) > 0);
      if (!per_token) continue;  // cpu: decoded to f32 panels shared by the tokens, not promised
      const int64_t N = 1 + static_cast<int64_t>(r.gen() % 40);
      std::vector<uint8_t> bytes = random_blocks(r, type, N, K);
      const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), type, K);
      // The backend claims at most what this test checks (ops::matmul_invariant_rows).
      ASSERT_LE(backend().matmul_invariant_rows(w), 8);
      for (int64_t T = 2; T <= (level ? 8 : 12); ++T) {  // cuda: 9–12 rows as chunks of GEMV rows
        SCOPED_TRACE(fmt::format("{} K={} N={} T={}", info.name, K, N, T));
        Buffer x = test::random_f32(r, {T, K});
        Buffer y = Buffer::allocate(DType::f32, {T, N}), alone = Buffer::allocate(DType::f32, {1, N});
        test::run(backend(), matmul, x, w, y);
        for (int64_t t = 0; t < T; ++t) {
          test::run(backend(), matmul, x.tensor().rows(t, t + 1), w, alone);
          for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y.f32()[t * N + n], alone.f32()[n]) << "t=" << t << " n=" << n;
        }
      }
    }
}

// The cpu backend's int8-activation GEMV (every type with a kernel) on every level this CPU runs that has it,
// with VPDPBUSD where the level has it and with the AVX2 sequence, against ref's f64 dot of the
// dequantized rows, for 1..8 tokens and beyond: on x of random floats within the int8 rounding bound
// (+ 2e-6 of Σ|x·w| for f32 arithmetic); on x that int8 represents exactly (integers with a ±127 in every block, so d = 1) within the f32 term alone;
// and on x86 with VPDPBUSD (and the 512-bit Q8_0 kernel) bit-equal to the AVX2 sequence below 64 tokens.
// 64 and 70 tokens take the avx512 level's 16-row panels (matmul_ggml_panel.cpp) for the 32-value types,
// on a CPU with AMX-INT8 its tiles (matmul_ggml_amx.cpp, bit-equal to the panels).
TEST(GgmlInt8, GemvMatchesRefWithinActivationRounding) {
  Rng r;
  SCOPED_TRACE(r.trace());
  int levels_run = 0;
  for (cpu::Level level : cpu::kLevels) {
    if (cpu::backend_for(level) == nullptr || KAPITSA_CPU_AT(level, ggml_int8_block)(GgmlType::q8_0) == 0) continue;
    ++levels_run;
    const auto has_vnni = KAPITSA_CPU_AT(level, ggml_int8_has_vnni);
    const auto gemv = KAPITSA_CPU_AT(level, matmul_ggml_int8);
    for (GgmlType type : kTypes) {
      const auto info = *ggml_type_info(static_cast<uint32_t>(type));
      const int64_t B = KAPITSA_CPU_AT(level, ggml_int8_block)(type);
      if (B == 0) continue;  // a type this level decodes to f32 (the other tests cover it)
      const int64_t N = 1 + static_cast<int64_t>(r.gen() % 40), K = 256 * (1 + static_cast<int64_t>(r.gen() % 4));
      std::vector<uint8_t> bytes = random_blocks(r, type, N, K);
      const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), type, K);
      std::vector<float> rows(static_cast<size_t>(N * K));
      for (int64_t n = 0; n < N; ++n) ref::dequantize_row(w, n, rows.data() + n * K);
      for (int64_t T : {1, 2, 3, 4, 5, 8, 11, 64, 70})
        for (bool exact : {false, true}) {
          Buffer x = test::random_f32(r, {T, K}, -3.0f, 3.0f);
          if (exact) {
            std::uniform_int_distribution<int> code(-127, 127);
            for (int64_t i = 0; i < T * K; ++i) x.f32()[i] = static_cast<float>(code(r.gen));
            for (int64_t b = 0; b < T * K; b += B) x.f32()[b + static_cast<int64_t>(r.gen() % B)] = r.gen() % 2 ? 127.0f : -127.0f;
          }
          Buffer y_vnni = Buffer::allocate(DType::f32, {T, N});
          for (bool vnni : {true, false}) {
            SCOPED_TRACE(fmt::format("{} {} T={} N={} K={} exact={} vnni={}", cpu::level_name(level), info.name, T, N, K, exact, vnni && has_vnni()));
            Buffer y = Buffer::allocate(DType::f32, {T, N});
            gemv(x, w, y, vnni);
            // x86: the VNNI kernels (and the avx512 level's 512-bit Q8_0 one) sum the same integers and
            // round them the same way as the plain AVX2 sequence: bit-equal outputs. (AArch64's SDOT and
            // baseline paths order their float sums differently: not asserted there.)
            if (vnni) std::memcpy(y_vnni.f32(), y.f32(), static_cast<size_t>(T * N) * sizeof(float));
#if defined(__x86_64__)
            else if (T < 64) {  // from 64 tokens (kPanelTokens) the types run as panels: another f32 order
              for (int64_t i = 0; i < T * N; ++i) ASSERT_EQ(y.f32()[i], y_vnni.f32()[i]) << "t=" << i / N << " n=" << i % N;
            }
#endif
            for (int64_t t = 0; t < T; ++t)
              for (int64_t n = 0; n < N; ++n) {
                const float* xt = x.f32() + t * K;
                const float* wn = rows.data() + n * K;
                double want = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) want += static_cast<double>(xt[k]) * wn[k], mag += std::abs(static_cast<double>(xt[k]) * wn[k]);
                const double rounding = exact ? 0 : int8_rounding_bound(xt, wn, K, B);
                ASSERT_NEAR(y.f32()[t * N + n], want, rounding + 2e-6 * mag + 1e-7) << "t=" << t << " n=" << n;
              }
          }
        }
    }
  }
  if (levels_run == 0) GTEST_SKIP() << "no level with the int8-activation GEMV on this CPU (it needs AVX2/FMA/F16C, or NEON)";
}

// The cuda int8-activation GEMV rounds x as the cpu backend's does (same blocks, same codes and scales)
// and sums the integer products exactly: the two agree to f32 summation order (2e-6 of Σ|x·w|), far
// inside the rounding bound each has against ref. Runs where a GPU and a cpu level with the int8 GEMV
// meet (the GPU machine).
TEST_P(OnBackend, GgmlInt8GemvRoundsXAsTheCpuBackend) {
  if (!on_cuda(backend())) GTEST_SKIP() << "compares the cuda backend with the cpu one";
  const BackendTable* cpu_table = find_backend("cpu");
  const std::optional<cpu::Level> level = cpu_table ? cpu::level_of(*cpu_table) : std::nullopt;
  if (!level || KAPITSA_CPU_AT(*level, ggml_int8_block)(GgmlType::q8_0) == 0)
    GTEST_SKIP() << "this CPU's level has no int8-activation GEMV";
  Rng r;
  SCOPED_TRACE(r.trace());
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k, GgmlType::q4_0, GgmlType::iq4_nl,
                        GgmlType::q5_k, GgmlType::iq4_xs})
    for (int64_t T : {1, 5}) {
      if (cuda_int8_block(type, T) == 0) continue;
      const auto info = *ggml_type_info(static_cast<uint32_t>(type));
      const int64_t N = 1 + static_cast<int64_t>(r.gen() % 37), K = 256 * (1 + static_cast<int64_t>(r.gen() % 4));
      SCOPED_TRACE(fmt::format("{} T={} N={} K={}", info.name, T, N, K));
      std::vector<uint8_t> bytes = random_blocks(r, type, N, K);
      const Linear w = Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.data()), type, K);
      Buffer x = test::random_f32(r, {T, K});
      Buffer yc = Buffer::allocate(DType::f32, {T, N}), yg = Buffer::allocate(DType::f32, {T, N});
      test::run(*cpu_table, matmul, x, w, yc);
      test::run(backend(), matmul, x, w, yg);
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        ref::dequantize_row(w, n, row.data());
        for (int64_t t = 0; t < T; ++t) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k) mag += std::abs(static_cast<double>(x.f32()[t * K + k]) * row[static_cast<size_t>(k)]);
          ASSERT_NEAR(yg.f32()[t * N + n], yc.f32()[t * N + n], 2e-6 * mag + 1e-7) << "t=" << t << " n=" << n;
        }
      }
    }
}

// matmul_many over block weights of several types (the cuda backend rounds x once for the int8 GEMV
// when their x blocks agree) equals each weight's matmul, bit for bit.
TEST_P(OnBackend, GgmlMatmulManyEqualsEachMatmul) {
  if (!cpu::level_of(backend()) && !on_cuda(backend())) GTEST_SKIP() << backend().name << " has no block kernels";
  Rng r;
  SCOPED_TRACE(r.trace());
  for (const std::vector<GgmlType>& types : {std::vector<GgmlType>{GgmlType::q4_k, GgmlType::q6_k, GgmlType::q4_k},
                                             std::vector<GgmlType>{GgmlType::q8_0, GgmlType::q8_0},
                                             std::vector<GgmlType>{GgmlType::q8_0, GgmlType::q4_k, GgmlType::q5_0}})
    for (int64_t T : {1, 4}) {
      const int64_t K = 512;
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<Linear> w;
      std::vector<Buffer> many, each;
      for (GgmlType type : types) {
        const auto info = *ggml_type_info(static_cast<uint32_t>(type));
        const int64_t N = 1 + static_cast<int64_t>(r.gen() % 40);
        bytes.push_back(random_blocks(r, type, N, K));
        w.push_back(Linear::ggml(Tensor(DType::u8, {N, K / info.block_size * info.block_bytes}, bytes.back().data()), type, K));
        many.push_back(Buffer::allocate(DType::f32, {T, N})), each.push_back(Buffer::allocate(DType::f32, {T, N}));
      }
      const Buffer x = test::random_f32(r, {T, K});
      std::vector<Tensor> outs;
      for (const Buffer& b : many) outs.push_back(b.tensor());
      test::run(backend(), matmul_many, x, w, outs);
      for (size_t i = 0; i < w.size(); ++i) {
        test::run(backend(), matmul, x, w[i], each[i]);
        for (int64_t j = 0; j < each[i].tensor().numel(); ++j)
          ASSERT_EQ(many[i].f32()[j], each[i].f32()[j]) << "weight " << i << " (" << ggml_type_name(types[i]) << ") T=" << T;
      }
    }
}

// matmul_experts over block experts (the cuda backend routes them on the device): every backend against
// ref, random ids with repeats, rows not a multiple of a block of rows. Tolerance as the matmul test's.
TEST_P(OnBackend, GgmlMatmulExpertsMatchRef) {
  const std::optional<cpu::Level> level = cpu::level_of(backend());
  if (!level && !on_cuda(backend())) GTEST_SKIP() << backend().name << " has no kernels for llama.cpp block weights yet";
  Rng r;
  SCOPED_TRACE(r.trace());
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k, GgmlType::q5_0, GgmlType::mxfp4, GgmlType::q5_k,
                        GgmlType::iq4_xs, GgmlType::q4_0, GgmlType::iq4_nl}) {
    const auto info = *ggml_type_info(static_cast<uint32_t>(type));
    const int64_t T = 3, k = 2, E = 5, N = 1 + static_cast<int64_t>(r.gen() % 19), K = 256 * (1 + static_cast<int64_t>(r.gen() % 2));
    const int64_t row_bytes = K / info.block_size * info.block_bytes;
    SCOPED_TRACE(fmt::format("{} N={} K={}", info.name, N, K));
    std::vector<uint8_t> bytes = random_blocks(r, type, E * N, K);
    std::vector<Linear> experts;
    for (int64_t e = 0; e < E; ++e)
      experts.push_back(Linear::ggml(Tensor(DType::u8, {N, row_bytes}, bytes.data() + e * N * row_bytes), type, K));
    const Buffer x = test::random_f32(r, {T, K});
    Buffer ids = Buffer::zeros(DType::i32, {T, k});
    int32_t* id = ids.tensor().data_as<int32_t>();
    for (int64_t i = 0; i < T * k; ++i) id[i] = static_cast<int32_t>(r.gen() % E);
    Buffer yr = Buffer::zeros(DType::f32, {T * k, N}), yc = Buffer::allocate(DType::f32, {T * k, N});
    for (int64_t i = 0; i < T * k * N; ++i) yc.f32()[i] = std::nanf("");  // every row is written
    test::run(test::ref(), matmul_experts, x, experts, ids, yr);
    test::run(backend(), matmul_experts, x, experts, ids, yc);
    // (an upper bound where that path is not taken)
    const int64_t int8_block = level ? KAPITSA_CPU_AT(*level, ggml_int8_block)(type) : cuda_int8_block(type, 1);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t p = 0; p < T * k; ++p)
      for (int64_t n = 0; n < N; ++n) {
        ref::dequantize_row(experts[static_cast<size_t>(id[p])], n, row.data());
        const float* xp = x.f32() + p / k * K;
        double mag = 0;
        for (int64_t i = 0; i < K; ++i) mag += std::abs(static_cast<double>(xp[i]) * row[static_cast<size_t>(i)]);
        const double rounding = int8_block > 0 ? int8_rounding_bound(xp, row.data(), K, int8_block) : 0;
        ASSERT_NEAR(yc.f32()[p * N + n], yr.f32()[p * N + n], rounding + 2e-6 * mag + 1e-7)
            << "p=" << p << " n=" << n << " expert " << id[p];
      }
  }
}

}  // namespace
}  // namespace kapitsa::ops
